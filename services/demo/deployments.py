"""The demo deployments a newcomer sees: a stand-in MoRIIO 1P1D on the tiny model, and the pair
that shows the trade (services/demo/trade.py).

`make run` stores the local tiny one when the store is empty and the `demo` setting
(PDCTL_DEMO=1) is on, and never starts it, so the first click is the operator's. With
PDCTL_DEMO_TRADE=1 too (as `make run` sets) it stores the trade pair beside it and starts it,
and whenever the pair is stored the serve offers it load (services/demo/load.py) while it runs: a
later `make run` adopts the running pair and the load resumes. `make run-cluster`
(harness/run_cluster.py) creates and starts the cluster one through the API: its prefill and
decode each take a GPU on their own Ray node, picked by the custom resource that node
advertises."""

from __future__ import annotations

import logging
from collections.abc import Callable

from controller import ControlService, DeploymentSpec
from domain.errors import PdctlError
from services.demo import trade as demo_trade
from services.demo.load import DemoLoad, Offer
from state.store import Store

log = logging.getLogger("pdctl.demo")
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


def ensure_demo(store: Store, trade: bool = False) -> bool:
    """Store the demo deployment (and with `trade` the trade pair) if there is no deployment at
    all; True if it did."""
    if store.names():
        return False
    store.create(demo_spec(), ACTOR, "the demo deployment of `make run`")
    for spec in demo_trade.trade_specs() if trade else ():
        store.create(spec, ACTOR, demo_trade.describe(spec.name))
    return True


async def run_trade(
    store: Store, controller: ControlService, created: bool, url_of: Callable[[str, int], str]
) -> DemoLoad | None:
    """Start the trade pair if it was just stored, and offer load to whichever of it is stored
    (the loop waits while a deployment is not running); None when neither is stored."""
    names = [n for n in demo_trade.TRADE_NAMES if n in store.names()]
    if not names:
        return None
    offer = Offer(
        demo_trade.wall_rate(),
        demo_trade.INPUT_LEN,
        demo_trade.OUTPUT_LEN,
        max_in_flight=demo_trade.MAX_IN_FLIGHT,
    )
    ports = {n: store.get(n).ports.proxy for n in names}
    load = DemoLoad(offer, controller.status, lambda name: url_of(name, ports[name]))
    for name in names:
        if created:
            current = store.get(name)
            try:
                await controller.start(
                    name, current.spec, current.ports, ACTOR, "the demo", current.revision
                )
            except PdctlError as exc:  # the serve goes on; the events say why
                log.warning("the demo deployment %s did not start: %s", name, exc)
        load.start(name)
    return load
