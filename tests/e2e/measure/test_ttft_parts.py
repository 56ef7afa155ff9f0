"""Where each TTFT went, through real stand-ins and `pdctl proxy`: the parts add up to the
TTFT the proxy saw, the transfer is the decode's own figure, and a slower modelled link grows
the transfer part and nothing else."""

import pytest

from harness.ttft_pair import breakdown, pair, quantiles

pytestmark = pytest.mark.e2e

FAST_GBPS, SLOW_GBPS = 50.0, 1.0
INPUT_LEN = 512
# KV of 511 tokens of Llama-3.1-8B (128 KiB a token) over 1 GB/s: ~67 ms; over 50 GB/s: ~1 ms
KV_BYTES = (INPUT_LEN - 1) * 131072
GROWTH_S = KV_BYTES / (SLOW_GBPS * 1e9) - KV_BYTES / (FAST_GBPS * 1e9)


def run(tmp, mode, gbps):
    with pair(tmp, mode, gbps) as front:
        return breakdown(tmp, front, 12, 4.0, INPUT_LEN, name=f"{mode}-{gbps:g}")


@pytest.mark.parametrize("mode", ["read"])
def test_a_slower_link_grows_the_transfer_part_and_nothing_else(tmp_path, mode):
    fast = quantiles(run(tmp_path, mode, FAST_GBPS))
    slow_records = run(tmp_path, mode, SLOW_GBPS)
    slow = quantiles(slow_records)
    assert all(r["ttft_parts"]["transfer_source"] == "engine" for r in slow_records)
    grown = (slow["transfer"]["p50"] - fast["transfer"]["p50"]) / 1000
    assert grown == pytest.approx(GROWTH_S, rel=0.25), (fast, slow)
    # the other parts move by far less than the transfer grew (loaded machine: 10 ms or 25%)
    for part in ("queue", "retry", "prefill", "decode"):
        moved = abs(slow[part]["p50"] - fast[part]["p50"]) / 1000
        assert moved < max(0.010, 0.25 * GROWTH_S), (part, fast, slow)


def test_write_mode_parts_add_up_and_the_push_overlaps_the_prefill(tmp_path):
    records = run(tmp_path, "write", SLOW_GBPS)
    for r in records:
        parts = r["ttft_parts"]
        assert parts["transfer_source"] == "engine"
        total = sum(parts[f"{p}_ms"] or 0.0 for p in ("queue", "retry", "prefill", "transfer"))
        total += parts["decode_ms"]
        # the proxy's TTFT, a hop before the client's: never more than the client's
        assert total <= r["ttft"] * 1000 + 0.5
        assert total >= r["ttft"] * 1000 * 0.7
    q = quantiles(records)
    # the push overlaps the prefill: the tail after the prefill's answer is shorter than the
    # whole transfer (~67 ms)
    assert q["transfer"]["p50"] < GROWTH_S * 1000
