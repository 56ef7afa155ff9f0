"""The demo deployments a newcomer sees: a stand-in MoRIIO 1P1D on the tiny model.

`make run` stores the local one when the store is empty and the `demo` setting (PDCTL_DEMO=1)
is on, and never starts it, so the first click is the operator's. `make run-cluster`
(harness/run_cluster.py) creates and starts the cluster one through the API: its prefill and
decode each take a GPU on their own Ray node, picked by the custom resource that node
advertises."""

from __future__ import annotations

from controller.deployment import DeploymentSpec
from state.store import Store

DEMO_NAME = "demo"
ACTOR = "pdctl:demo"
# Ray custom resources the demo cluster's two workers advertise, one each: the node selectors.
PREFILL_NODE_RESOURCE = "pdctl_demo_prefill"
DECODE_NODE_RESOURCE = "pdctl_demo_decode"


def demo_spec() -> DeploymentSpec:
    return DeploymentSpec.model_validate(_demo_body())


def cluster_demo_spec() -> DeploymentSpec:
    return DeploymentSpec.model_validate(cluster_demo_body())


def cluster_demo_body() -> dict:
    """The cluster demo as the API takes it: each group on the node advertising its resource,
    one GPU per instance (Ray assigns which)."""
    body = _demo_body()
    for group, resource in zip(
        body["groups"], (PREFILL_NODE_RESOURCE, DECODE_NODE_RESOURCE), strict=True
    ):
        group["placement"] = {"nodes": [{"resources": {resource: 1}}], "gpus_per_instance": 1}
    return body


def _demo_body() -> dict:
    return {
        "name": DEMO_NAME,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": [
            {"name": "prefill", "role": "prefill", "mode": "read"},
            {"name": "decode", "role": "decode", "mode": "read"},
        ],
        "slo": {"ttft_ms": 200, "itl_ms": 20, "itl_stat": "p99"},
        "proxy": {"hold_queue": 256, "hold_deadline_s": 60},
    }


def ensure_demo(store: Store) -> bool:
    """Store the demo deployment if there is no deployment at all; True if it did."""
    if store.names():
        return False
    store.create(demo_spec(), ACTOR, "the demo deployment of `make run`")
    return True
