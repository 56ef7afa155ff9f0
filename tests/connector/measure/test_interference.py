"""ITL spikes and the prefills they line up with, from token times alone."""

from connector.measure.interference import Interference


def steady(start: float, n: int, gap: float = 0.030) -> list[float]:
    return [start + i * gap for i in range(n)]


def test_a_spike_ending_as_another_request_prefilled_on_the_same_instance_lines_up():
    tracker = Interference()
    times = steady(0.0, 10)
    stalled = times[:5] + [t + 0.150 for t in times[5:]]  # one 180 ms gap after token 4
    tracker.prefill_done("http://e1", stalled[5] - 0.001)  # B's first token, same step
    assert tracker.spikes("http://e1", stalled) == (1, 1)


def test_a_spike_with_no_prefill_there_does_not_line_up():
    tracker = Interference()
    times = steady(0.0, 10)
    stalled = times[:5] + [t + 0.150 for t in times[5:]]
    tracker.prefill_done("http://e2", stalled[5])  # another instance
    tracker.prefill_done("http://e1", 10.0)  # long after
    assert tracker.spikes("http://e1", stalled) == (1, 0)


def test_steady_tokens_have_no_spikes_and_the_requests_own_start_does_not_count():
    tracker = Interference()
    times = steady(1.0, 50)
    tracker.prefill_done("http://e1", 1.0)  # its own first token
    assert tracker.spikes("http://e1", times) == (0, 0)
    assert tracker.spikes("http://e1", [1.0, 1.1]) == (0, 0)  # too few gaps to judge


def test_old_prefill_times_are_pruned_and_late_ones_kept_in_order():
    tracker = Interference(keep_s=10.0)
    for t in (0.0, 1.0, 30.0, 29.0):
        tracker.prefill_done("http://e1", t)
    assert tracker._prefills["http://e1"] == [29.0, 30.0]
