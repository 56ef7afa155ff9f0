"""`pdctl deploy` never writes a spec's secrets into what it renders: every secret-named env
value and every value of a secret flag is a reference (a Secret on Kubernetes, the host's
environment for compose), which expands back to exactly what runs (issue 39, weak 6)."""

from __future__ import annotations

import yaml

from controller.launch.placement import PROXY, Addresses
from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, instance_launch
from controller.manifests.compose import compose_yaml, render_compose
from controller.manifests.k8s import manifests_yaml, render_k8s
from controller.spec.deployment import DeploymentSpec
from tests.controller.manifests.test_k8s import POD_IP, by_kind, container, expand

SECRETS = ["sk-one-1", "sk-two-2", "sk-eq-3", "hf-top-4", "hf-group-5", "dbpw-6", "kv-json-7"]


def spec() -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {
            "name": "pd",
            "engine": "vllm",
            "model": "Qwen/Qwen3-0.6B",
            "topology": "disaggregated",
            "connector": "NixlConnector",
            "extra_args": ["--api-key", "sk-one-1", "sk-two-2"],
            "env": {"HF_TOKEN": "hf-top-4", "DATABASE_URL": "postgres://u:dbpw-6@db/x"},
            "groups": [
                {
                    "name": "prefill",
                    "role": "prefill",
                    "env": {"HF_TOKEN": "hf-group-5"},
                    "extra_args": [
                        "--api-key=sk-eq-3",
                        "--hf-overrides",
                        '{"api_key": "kv-json-7"}',
                    ],
                },
                {"name": "decode", "role": "decode"},
            ],
        }
    )


def test_k8s_manifests_hold_no_secret_and_expand_to_what_runs():
    s = spec()
    ports = allocate(s)
    docs = render_k8s(s, ports)
    text = manifests_yaml(docs, s)
    for secret in SECRETS:
        assert secret not in text, secret
    assert "kubectl create secret generic pd-secrets" in text
    # The kubelet expands each container back to the argv run, a secret where one was.
    where = Addresses(POD_IP, {**{n: POD_IP for n in s.instance_names()}, PROXY: "pd-proxy"})
    settings = LaunchSettings(pdctl_command=("pdctl",), host=POD_IP)
    keys: set[str] = set()
    for group, sts in zip(s.groups, by_kind(docs, "StatefulSet"), strict=True):
        c = container(sts)
        launch = instance_launch(s, group, 0, ports, settings, where)
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]
            for e in c["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        keys |= {r["key"] for r in refs.values() if r["name"] == "pd-secrets"}
        shown = {"POD_IP": POD_IP, **{v: f"<{r['key']}>" for v, r in refs.items()}}
        argv = [expand(a, shown) for a in c["command"] + c["args"]]
        assert len(argv) == len(launch.argv)
        for i, (ran, got) in enumerate(zip(launch.argv, argv, strict=True)):
            flag = ran.partition("=")[0]
            assert got in (ran, f"<{group.name}.arg-{i}>", f"{flag}=<{group.name}.arg-{i}>")
        assert refs["HF_TOKEN"] == {"name": "pd-secrets", "key": f"{group.name}.HF_TOKEN"}
    assert {"prefill.DATABASE_URL", "decode.DATABASE_URL", "decode.HF_TOKEN"} <= keys
    assert sum(k.startswith("prefill.arg-") for k in keys) == 4  # k1, k2, =k, the JSON


def test_compose_takes_every_secret_from_the_host():
    s = spec()
    text = compose_yaml(render_compose(s, allocate(s)))
    for secret in SECRETS:
        assert secret not in text, secret
    services = yaml.safe_load(text)["services"]
    prefill = services["prefill-0"]
    assert "--api-key=${PDCTL_SECRET_PREFILL_ARG_" in " ".join(prefill["command"])
    assert prefill["environment"]["DATABASE_URL"] == "${DATABASE_URL}"
