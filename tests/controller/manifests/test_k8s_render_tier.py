"""A render tier on Kubernetes (controller/manifests/k8s.py): a StatefulSet of GPU-less pods running
`vllm launch render` with the engines' model flags, reached by the proxy at each pod's stable
DNS name; every object passes its schema (tests/controller/manifests/test_k8s.py's checks), and the
stand-in's render pods run `pdctl sim --render`."""

from __future__ import annotations

import json
from typing import Any

from controller.spec.deployment import DeploymentSpec
from controller.spec.validation import check
from tests.controller.manifests.test_k8s import SPECS, by_kind, container, rendered, validate

RENDER = {"name": "render", "role": "render", "count": 3}


def with_render_tier(**changes: Any) -> DeploymentSpec:
    data = {**json.loads(SPECS["nixl-2p2d"].read_text()), **changes}
    data["groups"] = [*data["groups"], RENDER]
    spec = DeploymentSpec.model_validate(data)
    check(spec)
    return spec


def render_set(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [d for d in by_kind(docs, "StatefulSet") if d["metadata"]["name"].endswith("render")]
    return found


def test_the_render_tier_is_a_gpu_less_stateful_set_the_proxy_reaches_by_name():
    docs = rendered(with_render_tier())
    for doc in docs:
        validate(doc)
    workload = render_set(docs)
    assert workload["spec"]["replicas"] == 3
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert labels["llm-d.ai/role"] == "render" and labels["pdctl/group"] == "render"
    c = container(workload)
    assert c["command"] == ["vllm", "launch", "render"]
    assert c["args"][0] == "meta-llama/Llama-3.1-70B-Instruct"
    assert c["args"][c["args"].index("--host") + 1] == "$(POD_IP)"
    assert "resources" not in c and "securityContext" not in c  # no GPU, no RDMA pinning
    assert "--kv-transfer-config" not in c["args"]
    port = c["ports"][0]["containerPort"]
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    names = [d["metadata"]["name"] for d in by_kind(docs, "Service")]
    assert "nixl-2p2d-render" in names  # its headless Service gives each pod its name
    (proxy,) = by_kind(docs, "Deployment")
    args = container(proxy)["args"]
    renders = [args[i + 1] for i, a in enumerate(args) if a == "--render"]
    assert renders == [f"http://nixl-2p2d-render-{i}.nixl-2p2d-render:{port}" for i in range(3)]


def test_the_engines_are_rendered_as_without_a_render_tier():
    plain = rendered(DeploymentSpec.model_validate(json.loads(SPECS["nixl-2p2d"].read_text())))
    tiered = rendered(with_render_tier())
    engines = [d for d in tiered if not d["metadata"]["name"].endswith("render")]
    kinds = [(d["kind"], d["metadata"]["name"]) for d in engines]
    assert kinds == [(d["kind"], d["metadata"]["name"]) for d in plain]
    assert by_kind(engines, "StatefulSet") == by_kind(plain, "StatefulSet")  # whole, as before


def test_the_stand_ins_render_pods_run_pdctl_sim_render():
    spec = with_render_tier(engine="sim", hardware="h100")
    c = container(render_set(rendered(spec, pdctl_image="registry.example/pdctl:1")))
    assert c["command"] == ["pdctl"] and c["args"][0] == "sim" and c["args"][-1] == "--render"
    assert c["image"] == "registry.example/pdctl:1" and "resources" not in c
