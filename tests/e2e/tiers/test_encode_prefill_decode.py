"""Encode -> prefill -> decode on stand-ins, real processes on loopback: four encoders
(ec_producer) leave each image's embedding in the shared store, the NIXL prefill
(ec_consumer) finds them and pays no encoder time, the decode streams. Beside it the same
request through a proxy without the encode tier, on a prefill without EPD, which encodes every
image itself: its TTFT as the client sees it is longer by the encoder time the fan-out over
four encoders saved (Qwen2.5-VL-7B on H100s: 8.4 ms per image, x10 time scale)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest

from harness.processes import metric_value, running, sim
from harness.stack import nixl_sim, proxy

pytestmark = [pytest.mark.e2e, pytest.mark.tiers]

VL = ("--model", "qwen2.5-vl-7b-instruct", "--hardware", "h100", "--time-scale", "10")
IMAGES = 4
ENCODERS = 4


def _ec(role: str, store) -> tuple[str, str]:
    config = {
        "ec_connector": "ECExampleConnector",
        "ec_role": role,
        "ec_connector_extra_config": {"shared_storage_path": str(store)},
    }
    return ("--ec-transfer-config", json.dumps(config))


def _chat() -> dict:
    tag = uuid.uuid4().hex  # new images every request: nothing stored or prefix-cached
    parts = [{"type": "text", "text": "compare these pictures"}]
    parts += [
        {"type": "image_url", "image_url": {"url": f"http://img.invalid/{tag}/{i}.png"}}
        for i in range(IMAGES)
    ]
    return {
        "model": "qwen2.5-vl-7b-instruct",
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 4,
        "stream": True,
        "ignore_eos": True,
    }


def _ttft(base: str) -> float:
    """Seconds to the first content chunk of a streamed chat, as a client sees it."""
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(_chat()).encode(),
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as response:
        for line in response:
            if line.startswith(b"data: {") and b'"content":"' in line:
                first = time.monotonic() - start
                response.read()
                return first
    raise AssertionError("no content chunk")


def _images(proc, source: str) -> float:
    return metric_value(proc.metrics(), "pdctl_sim_encoder_images_total", source=source)


def test_the_encoders_run_the_images_and_the_prefill_does_not(tmp_path):
    store = tmp_path / "ec"
    encoders = [
        sim(tmp_path, f"encode{i}", *VL, *_ec("ec_producer", store)) for i in range(ENCODERS)
    ]
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer", *VL, *_ec("ec_consumer", store))
    plain = nixl_sim(tmp_path, "plain-prefill", "kv_producer", *VL)
    decode = nixl_sim(tmp_path, "decode", "kv_consumer", *VL)
    with running(*encoders, prefill, plain, decode):
        pd = ["--connector", "nixl", "--mode", "read", "--decode", decode.url]
        fanout = [flag for e in encoders for flag in ("--encode", e.url)]
        epd = proxy(tmp_path, "epd-proxy", *pd, "--prefill", prefill.url, *fanout)
        without = proxy(tmp_path, "pd-proxy", *pd, "--prefill", plain.url)
        with running(epd, without):
            _ttft(epd.url), _ttft(without.url)  # warm both paths' connections
            ttft_epd = min(_ttft(epd.url) for _ in range(2))
            ttft_plain = min(_ttft(without.url) for _ in range(2))
            # The encoders computed every image of the three EPD requests, one each.
            assert [_images(e, "computed") for e in encoders] == [3.0] * ENCODERS
            assert len(list(store.iterdir())) == 3 * IMAGES
            # The EPD prefill found every embedding and computed none ...
            assert _images(prefill, "ec_cache_hit") == 3 * IMAGES
            assert _images(prefill, "computed") == 0
            # ... the prefill without EPD encoded all of its own, and the decode none.
            assert _images(plain, "computed") == 3 * IMAGES
            assert _images(decode, "computed") == 0
            # Four images at 84 ms each (8.4 ms modelled x 10) on the plain prefill's one
            # lane, against one image's time on four encoders at once: 252 ms saved.
            saved = ttft_plain - ttft_epd
            print(f"TTFT with the encode tier {ttft_epd:.3f} s, without {ttft_plain:.3f} s")
            assert saved > 0.15, (ttft_epd, ttft_plain)
            encode_wait = metric_value(epd.metrics(), "pdctl_proxy_encode_wait_seconds_total")
            assert encode_wait >= 3 * 0.084
