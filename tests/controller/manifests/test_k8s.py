"""Kubernetes renders (controller/manifests/k8s.py): the MORI-IO blog's spec and a two-node NIXL
2P2D
equal their golden files and pass the schemas offline (built-in kinds by kubernetes-validate,
LeaderWorkerSet and PodMonitor by their vendored CRD schemas); the engines run render.py's
argv; what Kubernetes cannot give is refused naming the field.

Regenerate the golden files after an intended change: PDCTL_UPDATE_GOLDEN=1 pytest this file.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from controller.launch.placement import PROXY, Addresses
from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, instance_launch
from controller.manifests.k8s import K8sSettings, NotOnKubernetes, manifests_yaml, render_k8s
from controller.spec.deployment import DeploymentSpec
from controller.spec.rules import check
from harness.processes import ROOT

FIXTURES = Path(__file__).parents[2] / "fixtures" / "k8s"
KUBERNETES_VERSION = "1.33"  # the schemas kubernetes-validate checks built-in kinds against
CRD_SCHEMAS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset-v0.10.0.schema.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-v0.93.0.schema.json",
}
SPECS = {"mori-blog": ROOT / "deploy" / "mori-blog.json", "nixl-2p2d": FIXTURES / "nixl-2p2d.json"}
POD_IP = "10.42.1.7"


def spec_from(path: Path, **changes: Any) -> DeploymentSpec:
    spec = DeploymentSpec.model_validate({**json.loads(path.read_text()), **changes})
    check(spec)
    return spec


def nixl(**group_changes: Any) -> DeploymentSpec:
    """The 2P2D fixture with its prefill group changed."""
    data = json.loads(SPECS["nixl-2p2d"].read_text())
    data["groups"][0] = {**data["groups"][0], **group_changes}
    spec = DeploymentSpec.model_validate(data)
    check(spec)
    return spec


def rendered(spec: DeploymentSpec, **settings: Any) -> list[dict[str, Any]]:
    return render_k8s(spec, allocate(spec), K8sSettings(**settings))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def container(workload: dict[str, Any], template: str = "template") -> dict[str, Any]:
    spec = workload["spec"]
    pod = spec[template] if template == "template" else spec["leaderWorkerTemplate"][template]
    return pod["spec"]["containers"][0]


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of `$(NAME)` and `$$` in args and env values."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        text,
    )


def strict(schema: Any) -> Any:
    """A CRD schema as the API server's strict field validation (kubectl's default) reads it:
    an object with properties takes no others unless it preserves unknown fields."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: strict(v) if k != "properties" else {p: strict(s) for p, s in v.items()}
        for k, v in schema.items()
    }
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate(doc: dict[str, Any]) -> None:
    crd = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if crd is None:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        return
    schema = strict(json.loads((FIXTURES / crd).read_text()))
    jsonschema.validate(doc, schema, cls=jsonschema.Draft4Validator)


# Golden files and schemas ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPECS))
def test_renders_equal_their_golden_files(name):
    spec = spec_from(SPECS[name])
    text = manifests_yaml(rendered(spec), spec)
    golden = FIXTURES / f"{name}.yaml"
    if os.environ.get("PDCTL_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), f"regenerate with PDCTL_UPDATE_GOLDEN=1 if intended: {name}"
    assert list(yaml.safe_load_all(text)) == rendered(spec)  # the YAML says what was built


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_object_passes_its_schema(name):
    docs = rendered(spec_from(SPECS[name]))
    for doc in docs:
        validate(doc)
    kinds = [d["kind"] for d in docs]
    assert kinds[:4] == ["StatefulSet", "Service", "StatefulSet", "Service"]
    assert "PodMonitor" in kinds and "Deployment" in kinds


def test_the_schema_checks_catch_mistakes():
    sts = rendered(spec_from(SPECS["nixl-2p2d"]))[0]
    typo = copy.deepcopy(sts)
    container(typo)["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(typo)
    lws = by_kind(rendered(nixl(tp=8, placement={"nodes_per_instance": 2})), "LeaderWorkerSet")[0]
    validate(lws)
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["size"] = "2"
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


# What the engines run ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPECS))
def test_engines_run_the_rendered_vllm_serve_argv(name):
    """Once the kubelet expands $(POD_IP), each container's command and args are render.py's
    argv for an instance at that address."""
    spec = spec_from(SPECS[name])
    ports = allocate(spec)
    where = Addresses(
        POD_IP, {**{n: POD_IP for n in spec.instance_names()}, PROXY: f"{spec.name}-proxy"}
    )
    settings = LaunchSettings(pdctl_command=("pdctl",), host=POD_IP)
    for group, sts in zip(spec.groups, by_kind(rendered(spec), "StatefulSet"), strict=True):
        c = container(sts)
        argv = [expand(a, {"POD_IP": POD_IP}) for a in c["command"] + c["args"]]
        launch = instance_launch(spec, group, 0, ports, settings, where)
        assert argv == launch.argv
        assert argv[:2] == ["vllm", "serve"] and argv[argv.index("--host") + 1] == POD_IP
        env = env_of(c)
        for key, value in launch.env.items():
            if key.endswith("_VISIBLE_DEVICES"):
                assert key not in env  # the device plugin picks the pod's GPUs
            elif key != "VLLM_NIXL_SIDE_CHANNEL_HOST":
                assert env[key] == value


def test_nixl_side_channel_host_is_the_pod_ip():
    for sts in by_kind(rendered(spec_from(SPECS["nixl-2p2d"])), "StatefulSet"):
        env = env_of(container(sts))
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"].isdigit()


def test_moriio_host_ip_is_the_pod_ip_and_proxy_ip_the_proxy_service():
    docs = rendered(spec_from(SPECS["mori-blog"]))
    service = by_kind(docs, "Service")[-1]
    assert service["metadata"]["name"] == "mori-blog-proxy"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "http": 10001,
        "registry": 36367,
    }
    for sts in by_kind(docs, "StatefulSet"):
        args = container(sts)["args"]
        config = json.loads(
            expand(args[args.index("--kv-transfer-config") + 1], {"POD_IP": POD_IP})
        )
        extra = config["kv_connector_extra_config"]
        assert extra["host_ip"] == POD_IP and extra["proxy_ip"] == "mori-blog-proxy"
    proxy = container(by_kind(docs, "Deployment")[0])
    assert "--registry-allow" in proxy["args"] and "--prefill" not in proxy["args"]
    assert "PDCTL_REGISTRY_EXPECTED" not in env_of(proxy)
    policy = by_kind(docs, "NetworkPolicy")[0]
    registry_rule = policy["spec"]["ingress"][1]
    assert registry_rule["ports"] == [{"protocol": "TCP", "port": 36367}]


def test_the_nixl_proxy_reaches_each_instance_at_its_stable_dns_name():
    docs = rendered(spec_from(SPECS["nixl-2p2d"]))
    args = container(by_kind(docs, "Deployment")[0])["args"]
    urls = [(args[i], args[i + 1]) for i, a in enumerate(args) if a in ("--prefill", "--decode")]
    assert urls == [
        ("--prefill", "http://nixl-2p2d-prefill-0.nixl-2p2d-prefill:20001"),
        ("--prefill", "http://nixl-2p2d-prefill-1.nixl-2p2d-prefill:20001"),
        ("--decode", "http://nixl-2p2d-decode-0.nixl-2p2d-decode:20005"),
        ("--decode", "http://nixl-2p2d-decode-1.nixl-2p2d-decode:20005"),
    ]
    for sts, service in zip(by_kind(docs, "StatefulSet"), by_kind(docs, "Service"), strict=False):
        assert sts["spec"]["serviceName"] == service["metadata"]["name"]
        assert service["spec"]["clusterIP"] == "None"
        assert (
            service["spec"]["selector"].items()
            <= sts["spec"]["template"]["metadata"]["labels"].items()
        )


def test_literal_dollars_from_the_spec_survive_expansion():
    spec = spec_from(SPECS["nixl-2p2d"], env={"VLLM_LOGGING_PREFIX": "$(HOME) $$x $POD_IP"})
    env = env_of(container(rendered(spec)[0]))
    assert expand(env["VLLM_LOGGING_PREFIX"], {"HOME": "/root", "POD_IP": POD_IP}) == (
        "$(HOME) $$x $POD_IP"
    )


def test_labels_name_the_llm_d_role_and_the_group():
    docs = rendered(spec_from(SPECS["nixl-2p2d"]))
    for sts, role in zip(by_kind(docs, "StatefulSet"), ("prefill", "decode"), strict=True):
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert labels["llm-d.ai/role"] == role and labels["pdctl/group"] == role
        assert labels["app.kubernetes.io/instance"] == "nixl-2p2d"
    monitor = by_kind(docs, "PodMonitor")[0]
    assert monitor["spec"]["podMetricsEndpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "5s"}
    ]


# GPUs and nodes ---------------------------------------------------------------------------


def gpu_resources(c: dict[str, Any]) -> dict[str, str] | None:
    resources = c.get("resources")
    if resources is None:
        return None
    assert resources["requests"] == resources["limits"]
    return resources["limits"]


def test_gpu_requests_follow_gpus_per_instance_else_tp():
    docs = rendered(nixl(tp=2, placement={"gpus_per_instance": 4}))
    assert gpu_resources(container(docs[0])) == {"nvidia.com/gpu": "4"}
    assert gpu_resources(container(rendered(nixl(tp=2, placement=None))[0])) == {
        "nvidia.com/gpu": "2"
    }
    blog = rendered(spec_from(SPECS["mori-blog"]))  # gpus [0..3]: TP 4, on ROCm
    assert gpu_resources(container(blog[0])) == {"amd.com/gpu": "4"}
    assert "HIP_VISIBLE_DEVICES" not in env_of(container(blog[0]))


def test_the_stand_in_asks_for_no_gpu_and_runs_pdctl_sim():
    spec = spec_from(SPECS["nixl-2p2d"], engine="sim", hardware="h100")
    c = container(rendered(spec, pdctl_image="registry.example/pdctl:1")[0])
    assert gpu_resources(c) is None
    assert c["command"] == ["pdctl"] and c["args"][0] == "sim"
    assert c["image"] == "registry.example/pdctl:1" and "HF_TOKEN" not in env_of(c)


def test_one_instance_across_two_nodes_is_a_leader_worker_set_of_size_2():
    docs = rendered(nixl(tp=16, placement={"nodes_per_instance": 2}))
    lws = by_kind(docs, "LeaderWorkerSet")
    assert [d["metadata"]["name"] for d in lws] == ["nixl-2p2d-prefill"]
    template = lws[0]["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and lws[0]["spec"]["replicas"] == 2
    leader, worker = container(lws[0], "leaderTemplate"), container(lws[0], "workerTemplate")
    assert gpu_resources(leader) == gpu_resources(worker) == {"nvidia.com/gpu": "8"}
    assert leader["args"][-6:] == [
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "$(LWS_LEADER_ADDRESS)",
    ]  # fmt: skip
    assert worker["args"][-7:] == [
        "--nnodes", "2", "--node-rank", "$(LWS_WORKER_INDEX)",
        "--master-addr", "$(LWS_LEADER_ADDRESS)", "--headless",
    ]  # fmt: skip
    assert "ports" in leader and "ports" not in worker and "readinessProbe" not in worker
    # LWS makes the group's headless Service; the proxy reaches each leader under it.
    assert "nixl-2p2d-prefill" not in [s["metadata"]["name"] for s in by_kind(docs, "Service")]
    args = container(by_kind(docs, "Deployment")[0])["args"]
    assert "http://nixl-2p2d-prefill-1.nixl-2p2d-prefill:20001" in args


def test_one_selector_is_a_node_selector_and_several_are_any_of_affinity():
    docs = rendered(spec_from(SPECS["nixl-2p2d"]))
    prefill, decode = (s["spec"]["template"]["spec"] for s in by_kind(docs, "StatefulSet"))
    assert prefill["nodeSelector"] == {
        "kubernetes.io/hostname": "gpu-a",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    terms = decode["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [len(t["matchExpressions"]) for t in terms["nodeSelectorTerms"]] == [1, 2]
    proxy = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    assert proxy["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a"}


@pytest.mark.parametrize(
    ("spec", "loc"),
    [
        (
            lambda: nixl(placement={"nodes": [{"node_id": "0123abcd"}]}),
            ("groups", 0, "placement", "nodes", 0, "node_id"),
        ),
        (
            lambda: nixl(placement={"nodes": [{"labels": {"a": "b"}}, {"address": "10.0.0.2"}]}),
            ("groups", 0, "placement", "nodes", 1, "address"),
        ),
        (
            lambda: nixl(placement={"nodes": [{"resources": {"accelerator": 1}}]}),
            ("groups", 0, "placement", "nodes", 0, "resources"),
        ),
        (
            lambda: spec_from(SPECS["nixl-2p2d"], proxy={"node": {"address": "10.0.0.1"}}),
            ("proxy", "node", "address"),
        ),
        (
            lambda: nixl(placement={"gpus_per_instance": 0.5}),
            ("groups", 0, "placement", "gpus_per_instance"),
        ),
        (lambda: nixl(tp=3, placement={"nodes_per_instance": 2}), ("groups", 0, "tp")),
        (
            lambda: nixl(placement={"nodes_per_instance": 2}, extra_args=["--headless"]),
            ("groups", 0, "extra_args", 0),
        ),
        (lambda: nixl(ports=[{"http": 9001}, {"http": 9002}]), ("groups", 0, "ports")),
        (lambda: nixl(name="p" * 40), ("groups", 0, "name")),
        (lambda: nixl(name="proxy"), ("groups", 0, "name")),
        (
            lambda: spec_from(
                SPECS["nixl-2p2d"], connector="ExampleConnector", kv_connector_extra_config={}
            ),
            ("connector",),
        ),
    ],
    ids=[
        "ray-node-id",
        "node-address",
        "ray-resources",
        "proxy-address",
        "fractional-gpus",
        "uneven-split",
        "multi-node-flag",
        "per-instance-ports",
        "long-name",
        "proxy-name",
        "shared-directory",
    ],
)
def test_what_kubernetes_cannot_give_is_refused_naming_the_field(spec, loc):
    with pytest.raises(NotOnKubernetes) as caught:
        rendered(spec())
    assert caught.value.loc == loc
