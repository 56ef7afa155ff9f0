"""The scraper against a real /metrics server on loopback: a target stays up through one late or
failed scrape (a busy engine) and is down after two in a row."""

import asyncio
import json
from types import SimpleNamespace

import aiohttp
from aiohttp import web

from observe.scrape.observer import Observer
from observe.scrape.settings import ObserveSettings
from state.hub import Hub
from tests.observe.metrics_endpoint import serve_metrics

METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3.0\n"


def test_one_failed_scrape_keeps_a_target_up_two_bring_it_down():
    async def body():
        answers = iter([200, 500, 200, 500, 500, 200])

        async def metrics(_: web.Request) -> web.Response:
            status = next(answers)
            return web.Response(text=METRICS if status == 200 else "busy", status=status)

        runner, url = await serve_metrics(metrics)
        observer = Observer(None, SimpleNamespace(engine=None), Hub(), ObserveSettings())
        observer._session = aiohttp.ClientSession()  # start() would also open the database
        unit = {"name": "decode-0", "url": url, "state": "RUNNING"}
        try:
            ups = []
            for tick in range(6):
                state = await observer._scrape("pd", unit, float(tick))
                ups.append((state.up, dict(state.gauges) != {}))
        finally:
            await observer.close()
            await runner.cleanup()
        assert ups == [
            (True, True),
            (True, True),
            (True, True),
            (True, True),
            (False, False),
            (True, True),
        ]

    asyncio.run(body())


def test_a_section_from_above_goes_into_every_windows_frame_and_what_it_publishes():
    from controller.spec.deployment import DeploymentSpec
    from observe.scrape.topics import frame_topic
    from tests.specs import nixl_1p1d

    async def body():
        dep = SimpleNamespace(spec=DeploymentSpec.model_validate(nixl_1p1d()))
        controller = SimpleNamespace(
            supervisor=SimpleNamespace(deployments={"pd": dep}), status=lambda name: []
        )
        hub = Hub()
        hub.bind(asyncio.get_running_loop())
        observer = Observer(controller, SimpleNamespace(engine=None), hub, ObserveSettings())
        observer.sections["autopilot"] = lambda name: {"mode": "on", "line": f"{name} steered"}
        observer.sections["absent"] = lambda name: None  # nothing to say: no key at all
        with hub.subscribe([frame_topic("pd", "10s")]) as sub:
            await observer._observe("pd", 100.0)
            published = json.loads(await asyncio.wait_for(sub.get(), 5))
        frames = observer.latest["pd"]
        assert {w: f["autopilot"]["line"] for w, f in frames.items()} == {
            w: "pd steered" for w in frames
        }
        assert all("absent" not in f for f in frames.values())
        assert published["autopilot"] == {"mode": "on", "line": "pd steered"}

    asyncio.run(body())
