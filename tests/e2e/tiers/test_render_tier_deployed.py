"""A render tier the controller runs: a real `pdctl serve` with a NIXL deployment that has a
render group. The controller launches `pdctl sim --render` (shown as `vllm launch render`),
health-checks it, and tells the proxy of it; a completion through the proxy is rendered there
and gives the text the engines give without it; the advisor's frontend_cpu_share reads the
render tier's own process CPU and says so."""

from __future__ import annotations

import contextlib

import openai
import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_get, http_post, metric_value
from harness.stack import wait_until
from tests.specs import nixl_1p1d

pytestmark = [pytest.mark.e2e, pytest.mark.tiers]


@pytest.fixture
def plane(tmp_path):
    plane = ControlPlane(tmp_path).start()
    try:
        yield plane
    finally:
        if plane.api("POST", "/deployments/pd/stop")[0] == 202:
            with contextlib.suppress(TimeoutError):
                plane.wait("pd", lambda us: all(u["state"] != "RUNNING" for u in us.values()), 30)
        plane.close()


def rendered(url: str) -> float:
    text = http_get(url + "/metrics")[1].decode()
    return metric_value(text, "http_requests_total", handler="/v1/completions/render", status="2xx")


def test_the_controller_runs_the_render_tier_and_the_proxy_uses_it(plane) -> None:
    body = nixl_1p1d()
    body["groups"].append({"name": "render", "role": "render"})
    status, created = plane.api("POST", "/deployments", body)
    assert status == 201, created
    plane.api("POST", "/deployments/pd/start")
    units = plane.running("pd", timeout=60)
    render = units["render-0"]
    assert render["role"] == "render"
    front = f"http://127.0.0.1:{created['ports']['proxy']}"
    client = openai.OpenAI(base_url=front + "/v1", api_key="none", max_retries=0)
    ask = {"model": "tiny", "prompt": "the controller runs a render tier", "max_tokens": 10}
    through = client.completions.create(**ask).choices[0].text
    direct = http_post(units["decode-0"]["url"] + "/v1/completions", ask)[1]
    assert through == direct["choices"][0]["text"]
    assert rendered(render["url"]) == 1

    def cpu_signal() -> dict | None:
        for _ in range(5):
            client.completions.create(**ask)
        _, advice = plane.api("GET", "/deployments/pd/advice?window=10s")
        return advice if "frontend_cpu_share" in advice["signals"] else None

    advice = wait_until(cpu_signal, 30, "frontend_cpu_share from the render tier")
    assert "busiest render tier instance" in advice["sources"]["frontend_cpu_share"]
    assert advice["signals"]["frontend_cpu_share"] >= 0
