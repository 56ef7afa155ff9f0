"""The observer watches what discovery found: the instances a Prometheus lists are scraped
under their stable names, the frame shows the set and its source, and an instance that goes
leaves the frame and the observer's targets (real HTTP on loopback)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from controller.spec.deployment import DeploymentSpec
from observe.scrape.observer import Observer
from observe.scrape.settings import ObserveSettings
from state.hub import Hub

pytestmark = pytest.mark.anyio

GOOD = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2.0\n"


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture
async def engines() -> AsyncIterator[list[str]]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=GOOD)

    made = []
    for _ in range(3):
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        made.append(await serve(app))
    yield [url for _, url in made]
    for runner, _ in made:
        await runner.cleanup()


class Prometheus:
    def __init__(self) -> None:
        self.listed: dict[str, str] = {}  # engine URL -> role

    async def targets(self, _: web.Request) -> web.Response:
        active = [
            {"labels": {"llm_d_ai_role": role}, "scrapeUrl": url + "/metrics"}
            for url, role in self.listed.items()
        ]
        return web.json_response({"status": "success", "data": {"activeTargets": active}})


def attached(prom: str) -> Any:
    def group(role: str) -> dict[str, Any]:
        return {
            "name": role,
            "role": role,
            "discover": {"prometheus": prom, "match": {"llm-d.ai/role": role}},
        }

    return DeploymentSpec.model_validate(
        {
            "name": "found",
            "engine": "external",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": "NixlConnector",
            "groups": [group("prefill"), group("decode")],
        }
    )


async def settle(observer: Observer, spec: Any, now: float) -> None:
    observer.discovery.tick("found", spec, now, observer._session)
    await asyncio.gather(*(f.task for f in observer.discovery._groups.values() if f.task))
    await observer._observe("found", now)


async def test_discovered_instances_are_scraped_and_shown_until_they_go(engines):
    prom = Prometheus()
    app = web.Application()
    app.router.add_get("/api/v1/targets", prom.targets)
    runner, prom_url = await serve(app)
    spec = attached(prom_url)
    controller = SimpleNamespace(supervisor=SimpleNamespace(deployments={}))
    observer = Observer(controller, SimpleNamespace(engine=None), Hub(), ObserveSettings())
    observer._session = aiohttp.ClientSession()
    observer.attached = {"found": spec}
    try:
        prom.listed = {engines[0]: "prefill", engines[1]: "decode", engines[2]: "prefill"}
        await settle(observer, spec, 100.0)
        frame = observer.frame("found")
        assert frame is not None
        assert {i["name"]: (i["url"], i["up"]) for i in frame["instances"]} == {
            "prefill-0": (engines[0], True),
            "prefill-1": (engines[2], True),
            "decode-0": (engines[1], True),
        }
        assert [(d["group"], d["source"]) for d in frame["discovery"]] == [
            ("prefill", "prometheus"),
            ("decode", "prometheus"),
        ]
        del prom.listed[engines[0]]
        await settle(observer, spec, 110.0)
        frame = observer.frame("found")
        assert frame is not None
        assert [i["name"] for i in frame["instances"]] == ["prefill-1", "decode-0"]
        assert {k[1] for k in observer._targets} == {"prefill-1", "decode-0"}
        told = [(c.kind, c.detail["instance"]) for _, c in observer.discovery.events]
        assert told[-1] == ("attached.instance_gone", "prefill-0")
    finally:
        await observer.close()
        await runner.cleanup()
