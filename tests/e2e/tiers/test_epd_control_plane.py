"""`pdctl serve` runs an encode -> prefill -> decode deployment of stand-ins from its spec: the
controller renders the EC configs and the proxy's --encode, and an image request through the
proxy is encoded on the encoder and found by the prefill."""

from __future__ import annotations

import contextlib

import pytest

from harness.control_plane import ControlPlane
from harness.processes import http_get, http_post, metric_value
from tests.specs import epd_1e1p1d

pytestmark = [pytest.mark.e2e, pytest.mark.tiers]


def test_serve_starts_epd_and_routes_images_through_the_encoder(tmp_path):
    store = tmp_path / "runs" / "engine-files" / "ec-store"  # under a default root
    body = epd_1e1p1d(name="epd")
    body["ec_transfer"]["ec_connector_extra_config"]["shared_storage_path"] = str(store)
    plane = ControlPlane(tmp_path).start()
    try:
        status, created = plane.api("POST", "/deployments", body)
        assert status == 201, created
        status, answer = plane.api("POST", "/deployments/epd/start")
        assert status == 202, answer
        units = plane.running("epd")
        proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
        parts = [{"type": "text", "text": "two pictures"}] + [
            {"type": "image_url", "image_url": {"url": f"http://img.invalid/{i}.png"}}
            for i in range(2)
        ]
        status, out = http_post(
            proxy + "/v1/chat/completions",
            {
                "model": body["model"],
                "messages": [{"role": "user", "content": parts}],
                "max_tokens": 3,
                "ignore_eos": True,
            },
            timeout=30,
        )
        assert status == 200, out
        assert out["usage"]["completion_tokens"] == 3
        assert out["usage"]["prompt_tokens"] > 2 * 1296

        def images(unit: str, source: str) -> float:
            text = http_get(units[unit]["url"] + "/metrics")[1].decode()
            return metric_value(text, "pdctl_sim_encoder_images_total", source=source)

        assert images("encode-0", "computed") == 2
        assert images("prefill-0", "ec_cache_hit") == 2
        assert images("prefill-0", "computed") == 0
        assert len(list(store.iterdir())) == 2
    finally:
        with contextlib.suppress(TimeoutError, AssertionError):
            plane.api("POST", "/deployments/epd/stop")
            plane.wait(
                "epd",
                lambda us: all(u["state"] in ("STOPPED", "EXITED") for u in us.values()),
                30,
            )
        plane.close()
