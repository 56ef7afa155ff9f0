"""Deployment specs the controller tests share: the MORI-IO blog setup, a NIXL 1P1D, a tiny
stand-in pair for real-process tests; and a fake cluster's nodes."""

from __future__ import annotations

from typing import Any

from controller.launch.placement import Node
from controller.launch.ports import AllocatedPorts, allocate
from controller.spec.deployment import DeploymentSpec

BLOG_MODEL = "Qwen/Qwen3-235B-A22B-FP8"


def mori_blog(mode: str = "write", **changes: Any) -> DeploymentSpec:
    """vLLM blog 2026-04-07: 1P TP4 on GPUs 0-3, 1D TP4 on 4-7, MoRIIO, the blog's ports."""
    group = {"tp": 4, "mode": mode, "max_num_seqs": 64, "max_num_batched_tokens": 4096}
    return DeploymentSpec.model_validate(
        {
            "name": "mori-blog",
            "engine": "vllm",
            "model": BLOG_MODEL,
            "hardware": "mi300x",
            "topology": "disaggregated",
            "connector": "MoRIIOConnector",
            "prefix_caching": False,
            "max_model_len": 16384,
            "groups": [
                {
                    "name": "prefill",
                    "role": "prefill",
                    "gpus": [0, 1, 2, 3],
                    **group,
                    "ports": [{"http": 20005, "handshake": 6301, "notify": 6105}],
                },
                {
                    "name": "decode",
                    "role": "decode",
                    "gpus": [4, 5, 6, 7],
                    **group,
                    "ports": [{"http": 40005, "handshake": 7301, "notify": 7501}],
                },
            ],
            "proxy": {"port": 10001, "registry_port": 36367},
            "extra_args": [
                "--enable-expert-parallel",
                "--distributed-executor-backend",
                "mp",
                "--gpu-memory-utilization",
                "0.9",
            ],
            "env": {
                "VLLM_ROCM_USE_AITER": "1",
                "MORI_DISABLE_AUTO_XGMI": "1",
                "MORI_IO_ENABLE_NOTIFICATION": "0",
            },
            **changes,
        }
    )


def nixl_1p1d(**changes: Any) -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {
            "name": "nixl-1p1d",
            "engine": "vllm",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "hardware": "h100",
            "topology": "disaggregated",
            "connector": "NixlConnector",
            "groups": [
                {
                    "name": "prefill",
                    "role": "prefill",
                    "gpus": [0],
                    "ports": [{"http": 8100, "side_channel": 5600}],
                },
                {
                    "name": "decode",
                    "role": "decode",
                    "gpus": [1],
                    "ports": [{"http": 8200, "side_channel": 5601}],
                },
            ],
            "proxy": {"port": 8000, "registry_port": 36367},
            **changes,
        }
    )


def tiny_pair(
    name: str = "tiny-pd", connector: str = "NixlConnector", **changes: Any
) -> DeploymentSpec:
    """The stand-in's tiny model, 1P1D, no GPUs: for real processes on loopback."""
    moriio = connector == "MoRIIOConnector"
    mode = {"mode": "read"} if moriio else {}
    return DeploymentSpec.model_validate(
        {
            "name": name,
            "engine": "sim",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": connector,
            "prefix_caching": not moriio,
            "groups": [
                {"name": "prefill", "role": "prefill", **mode},
                {"name": "decode", "role": "decode", **mode},
            ],
            **changes,
        }
    )


def moriio_pairs(
    pairs: int = 1, mode: str = "read", name: str = "mori", count: int = 1
) -> DeploymentSpec:
    """Stand-in MoRIIO prefill/decode pairs of groups (`count` instances each), every group
    in `mode`: what a switch moves."""
    groups: list[dict[str, Any]] = []
    for i in range(pairs):
        suffix = "" if pairs == 1 else f"-{i}"
        groups += [
            {"name": f"prefill{suffix}", "role": "prefill", "mode": mode, "count": count},
            {"name": f"decode{suffix}", "role": "decode", "mode": mode, "count": count},
        ]
    return DeploymentSpec.model_validate(
        {
            "name": name,
            "engine": "sim",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": "MoRIIOConnector",
            "prefix_caching": False,
            "groups": groups,
        }
    )


def cluster_nodes(gpus: float = 2.0) -> list[Node]:
    """Three nodes on their own loopback addresses (a head and two workers), as a fake cluster
    (tests/controller/fakes.py FakeBackend(nodes=...)) lists them."""
    return [
        Node("a" * 56, "127.0.0.2", gpus=gpus, gpus_free=gpus, head=True),
        Node("b" * 56, "127.0.0.3", gpus=gpus, gpus_free=gpus, labels={"pool": "decode"}),
        Node("c" * 56, "127.0.0.4", gpus=gpus, gpus_free=gpus, resources={"rdma": 1.0}),
    ]


def gpu_pair(name: str = "tiny-pd") -> DeploymentSpec:
    """tiny_pair asking one GPU per instance of a cluster (Ray assigns it)."""
    one = {"placement": {"gpus_per_instance": 1}}
    return tiny_pair(
        name,
        groups=[
            {"name": "prefill", "role": "prefill", **one},
            {"name": "decode", "role": "decode", **one},
        ],
    )


def kept_ports(old: DeploymentSpec, ports: AllocatedPorts, new: DeploymentSpec) -> AllocatedPorts:
    """`new`'s ports as admission gives them to a new revision: the proxy's and every kept
    instance's stay, new instances get free ones (services/admission.py)."""
    fresh = allocate(new, ports.claimed(old))
    kept = {n: p for n, p in ports.instances.items() if n in fresh.instances}
    return AllocatedPorts(ports.proxy, ports.registry, {**fresh.instances, **kept})
