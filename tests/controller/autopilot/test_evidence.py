"""The autopilot moves nothing on a window a change disturbed (the switch's own held requests
read as TTFT-bound) or with too few real requests, and says "not enough evidence (why)"; a
clean, busy window moves as before."""

from __future__ import annotations

from controller.autopilot.decide import decide, sample
from tests.controller.autopilot.test_decide import AP, NOW, ROLES, TTFT_BOUND, window

SWITCHED = (
    "not enough evidence (a mode switch (rollout 4, hold) ended 3 s ago, inside the 10s "
    "window and its 10 s settling: it measures the change, not the workload)"
)


def test_a_window_a_switch_disturbed_moves_nothing_and_says_why():
    samples = window(**TTFT_BOUND)
    samples[-5:] = window(span=4, **TTFT_BOUND, disturbed=SWITCHED)
    d = decide(AP, samples, ROLES, [], NOW)
    assert d.kind == "none" and d.instance is None
    assert d.why == f"TTFT-bound for 60 s: one decode to prefill, not made: {SWITCHED}"


def test_a_trickle_of_real_requests_moves_nothing():
    d = decide(AP, window(**TTFT_BOUND, requests=2.0), ROLES, [], NOW)
    assert d.kind == "none"
    assert "not enough evidence (about 12 real requests in the last 60 s, 20 needed" in d.why


def test_the_frames_real_requests_count_over_first_tokens():
    """The proxy's count (every outcome, no canary) is the evidence; first tokens stand in
    only for a frame that carries none."""
    d = decide(AP, window(**TTFT_BOUND, requests=2.0, real_requests=30.0), ROLES, [], NOW)
    assert d.kind == "move"


def test_a_clean_busy_window_moves_again():
    assert decide(AP, window(**TTFT_BOUND), ROLES, [], NOW).kind == "move"


def test_a_sample_reads_the_frames_evidence():
    marked = {
        "evidence": {"real_requests": 12, "disturbed": True, "enough": False, "why": SWITCHED}
    }
    got = sample(marked, NOW)
    assert got.real_requests == 12 and got.disturbed == SWITCHED
    clean = sample({"evidence": {"real_requests": 40, "disturbed": False, "why": None}}, NOW)
    assert clean.disturbed is None


def test_a_move_the_arrivals_lead_keeps_its_own_minimum_but_not_a_disturbed_window():
    from controller.autopilot.decide import evidence_lacking

    few = window(requests=0.0, real_requests=2.0)
    assert evidence_lacking(few, AP, led=True) is None
    assert evidence_lacking(few, AP) is not None
    assert evidence_lacking(window(disturbed=SWITCHED), AP, led=True) == SWITCHED
