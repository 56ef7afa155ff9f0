"""The deployment page says where its TTFT and ITL tiles come from (the frame's
`latency_source`) and, for an attached deployment behind another proxy, the engines' mean
TTFT parts (`ttft_breakdown`, observe/attached/ttft.py); static/pdctl-live.js says the same
words live."""

from __future__ import annotations

from pathlib import Path

from tests.web.routes.advise.test_advice_api import FakeObserver, live_frame
from web.views.latency_source import SAID

BREAKDOWN = {
    "source": "engines",
    "parts": {
        "prefill_queue": 25.2,
        "prefill": 154.4,
        "kv_transfer": 148.6,
        "decode_queue": 51.3,
        "first_decode_step": 57.0,
    },
    "sum_ms": 436.6,
}


def test_an_engine_sourced_frame_says_so_with_its_parts(pd_and_solo):
    frame = {**live_frame("pd"), "latency_source": "engines", "ttft_breakdown": BREAKDOWN}
    pd_and_solo.app.state.observer = FakeObserver({"pd": frame})
    page = pd_and_solo.get("/deployments/pd").text
    assert page.count('data-source="engines"') == 2  # the TTFT and the ITL tiles
    assert "engines&#39; own histograms (prefill + decode legs)" in page
    assert (
        "engines&#39; mean TTFT parts: prefill queue 25 · prefill 154 · KV transfer 149 · "
        "decode queue 51 · first decode step 57 = 437 ms"
    ) in page


def test_a_proxy_sourced_frame_is_client_side_with_no_parts(pd_and_solo):
    pd_and_solo.app.state.observer = FakeObserver({"pd": live_frame("pd")})
    page = pd_and_solo.get("/deployments/pd").text
    assert page.count('data-source="proxy"') == 2 and "client side" in page
    assert '<small id="ttft-parts" hidden>' in page


def test_the_live_script_says_the_same_words():
    script = (Path(__file__).parents[3] / "static" / "pdctl-live.js").read_text()
    for said in SAID.values():
        assert said in script
