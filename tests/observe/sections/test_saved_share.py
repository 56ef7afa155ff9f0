"""The frame's share of prompt tokens saved by bidirectional KV: prefills only."""

from __future__ import annotations

import pytest

from observe.metrics.windows import Delta
from observe.sections.saved_share import BY_SOURCE, prompt_saved_share


def by_source(**tokens: float) -> Delta:
    return Delta(10.0, {(BY_SOURCE, (("source", s),)): v for s, v in tokens.items()})


def test_the_share_is_pulled_over_all_prompt_tokens_of_the_prefills() -> None:
    parts = [
        ("prefill", by_source(local_compute=100, local_cache_hit=100, external_kv_transfer=600)),
        ("prefill", by_source(local_compute=200, external_kv_transfer=0)),
        # a decode's tokens arrive by transfer on every request: never counted as saved
        ("decode", by_source(local_compute=10, external_kv_transfer=5000)),
    ]
    assert prompt_saved_share(parts) == pytest.approx(600 / 1000)


@pytest.mark.parametrize(
    "parts",
    [
        [],
        [("decode", by_source(external_kv_transfer=10))],
        [("prefill", Delta(10.0, {}))],  # an engine without by-source counts (older vLLM)
        [("prefill", by_source(local_compute=0, external_kv_transfer=0))],  # no traffic
        [("colocated", by_source(local_compute=5))],
    ],
)
def test_no_share_without_prefill_prompts(parts) -> None:
    assert prompt_saved_share(parts) is None


def test_no_pull_backs_is_a_share_of_zero() -> None:
    assert prompt_saved_share([("prefill", by_source(local_compute=50))]) == 0.0


def test_the_frame_carries_the_prefills_saved_share() -> None:
    from observe.build import build_frame
    from tests.observe.series import engine_text
    from tests.observe.test_build import INFO, UNITS, target

    prefill = target(
        [
            (0.0, engine_text(local_tokens=0, external_tokens=0)),
            (10.0, engine_text(local_tokens=250, external_tokens=750)),
        ]
    )
    decode = target([(0.0, engine_text()), (10.0, engine_text(external_tokens=5000))])
    frame = build_frame(INFO, UNITS, {"prefill-0": prefill, "decode-0": decode}, "10s", 10.0)
    assert frame["prompt_saved_share"] == pytest.approx(0.75)
