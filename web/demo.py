"""The demo deployment `make run` shows a newcomer: a stand-in MoRIIO 1P1D on the tiny model,
stored when the store is empty and the `demo` setting (PDCTL_DEMO=1) is on; never started by
itself, so the first click is the operator's."""

from __future__ import annotations

from controller.deployment import DeploymentSpec
from state.store import Store

DEMO_NAME = "demo"
ACTOR = "pdctl:demo"


def demo_spec() -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {
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
    )


def ensure_demo(store: Store) -> bool:
    """Store the demo deployment if there is no deployment at all; True if it did."""
    if store.names():
        return False
    store.create(demo_spec(), ACTOR, "the demo deployment of `make run`")
    return True
