"""Disturbed windows: a rollout marks every window it ran in, and the settling after it; a
window of pdctl's canaries alone, or a trickle, is not evidence either."""

from __future__ import annotations

from types import SimpleNamespace

from domain.measures.evidence import AFTER_CHANGE_S, MIN_REAL_REQUESTS
from observe.metrics.windows import Delta
from observe.sections.evidence import judge, marks, real_requests

NOW = 10_000.0


def rollout(kind: str, ended_ago: float | None, rid: str = "7", strategy: str = "hold"):
    running = ended_ago is None
    return SimpleNamespace(
        id=rid,
        kind=kind,
        strategy=strategy,
        state="running" if running else "done",
        started_at=NOW - (ended_ago or 0.0) - 5.0,
        ended_at=None if running else NOW - ended_ago,
    )


def test_a_switch_marks_the_minute_after_it_and_its_settling_then_no_more():
    for ago, disturbed in ((1.0, True), (60.0 + AFTER_CHANGE_S - 1, True), (75.0, False)):
        found = judge(240, marks([rollout("switch", ago)], NOW, 400.0), "1m", 60.0, NOW)
        assert found["disturbed"] is disturbed, ago
        assert found["enough"] is not disturbed


def test_every_kind_of_change_disturbs_but_a_first_start_does_not():
    for kind in ("apply", "restart", "switch", "role_move", "advisor", "undo", "rollback"):
        found = judge(240, marks([rollout(kind, 3.0)], NOW, 400.0), "1m", 60.0, NOW)
        assert found["disturbed"] and found["changes"][0]["kind"] == kind
    assert marks([rollout("start", 3.0)], NOW, 400.0) == []


def test_a_running_change_says_so_and_names_the_rollout():
    found = judge(
        240, marks([rollout("role_move", None, "12", "in-place")], NOW, 400.0), "1m", 60.0, NOW
    )
    assert found["why"] == (
        "not enough evidence (a role move (rollout 12, in-place) is running: the 1m window "
        "measures the change, not the workload)"
    )
    assert found["changes"][0]["running"] is True and found["changes"][0]["ended_at"] is None


def test_the_short_window_is_clear_before_the_long_one():
    changes = marks([rollout("switch", 30.0)], NOW, 400.0)
    assert judge(240, changes, "10s", 10.0, NOW)["enough"] is True
    assert judge(240, changes, "1m", 60.0, NOW)["enough"] is False


def test_no_real_traffic_is_no_evidence_whatever_the_canaries_did():
    found = judge(0, [], "1m", 60.0, NOW)
    assert found["enough"] is False and found["disturbed"] is False
    assert found["why"] == (
        f"not enough evidence (no real traffic: 0 real request(s) in the 1m window, "
        f"{MIN_REAL_REQUESTS} needed; pdctl's own canaries and probes are not traffic)"
    )
    assert judge(MIN_REAL_REQUESTS - 1, [], "1m", 60.0, NOW)["enough"] is False
    assert judge(MIN_REAL_REQUESTS, [], "1m", 60.0, NOW)["enough"] is True
    assert "no request counts" in (judge(None, [], "1m", 60.0, NOW)["why"] or "")


def test_real_requests_count_every_outcome_at_the_proxy_and_no_canary():
    counts = {
        ("pdctl_proxy_requests_total", (("outcome", "ok"),)): 30.0,
        ("pdctl_proxy_requests_total", (("outcome", "failed"),)): 2.0,
        ("pdctl_proxy_requests_total", (("outcome", "rejected"),)): 5.0,
        ("pdctl_proxy_canary_requests_total", (("verdict", "ok"),)): 12.0,
    }
    assert real_requests(Delta(60.0, counts)) == 37
    assert real_requests(Delta(60.0, {})) is None


def test_long_requests_count_when_they_arrive_not_only_when_they_end():
    counts = {
        ("pdctl_proxy_requests_total", (("outcome", "ok"),)): 3.0,
        ("pdctl_proxy_arrival_gaps_total", ()): 21.0,
    }
    assert real_requests(Delta(10.0, counts)) == 21
