"""make bench-bidir's pure parts: rounds pooled per turn, the on/off table."""

from bench.turns.multi_turn import TurnSummary
from benchmarks.bidir_kv import pooled, report


def summary(turn: int, ttft: float, computed: float) -> TurnSummary:
    return TurnSummary(turn, 4, ttft, 100.0 * (turn + 1), {"local_compute": computed})


def test_rounds_are_pooled_turn_by_turn():
    one = [summary(0, 100.0, 2000), summary(1, 50.0, 100)]
    two = [summary(0, 200.0, 2000), summary(1, 70.0, 300)]
    first, second = pooled([one, two])
    assert (first.ok, first.mean_ttft_ms) == (8, 150.0)
    assert second.extra["local_compute"] == 200.0


def test_the_table_has_a_row_per_turn_with_ratios():
    on = [summary(0, 100.0, 2000), summary(1, 50.0, 100)]
    off = [summary(0, 100.0, 2000), summary(1, 100.0, 300)]
    lines = report(on, off).splitlines()
    assert len(lines) == 5
    assert " 0.50 " in lines[3] and " 0.33 " in lines[3]
    assert lines[-1].endswith("4/4 4/4")
