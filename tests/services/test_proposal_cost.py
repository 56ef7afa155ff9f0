"""A proposal's cost from what the rollout would do: a change that restarts the proxy is
recreated and says it refuses connections for the proxy's measured restart time; roll and
hold say they lose nothing, a hold that new requests wait."""

from __future__ import annotations

from services.proposal_cost import restart_cost

STARTS = {"": [2.9, 3.2, 3.5], "prefill": [11.0, 12.0, 13.0], "decode": [10.0], "colocated": [9.0]}


def preview(default: str, restart: list[str], start=(), stop=()) -> dict:
    return {
        "changes": {"keep": [], "restart": restart, "start": list(start), "stop": list(stop)},
        "default": default,
    }


def test_a_colocate_that_restarts_the_proxy_says_it_refuses_connections_and_for_how_long():
    cost = restart_cost(
        preview("recreate", ["proxy", "prefill-0"], start=["colocated-0"], stop=["decode-0"]),
        STARTS,
        rate=4.0,
        hold_deadline_s=30.0,
    )
    assert cost["strategy"] == "recreate" and cost["proxy_restarts"] is True
    assert cost["proxy_restart_s"] == 3.2 and cost["instances_restart_s"] == 12.0
    words = cost["disruption"]
    assert (
        "the proxy refuses new connections for ~3.2 s (the median measured start) while it restarts"
        in words
    )
    assert "requests in flight fail" in words
    assert "2 engine instance(s) restart (prefill-0, colocated-0), 1 stop (decode-0)" in words
    assert "about 48 requests fail or are refused over those ~12.0 s" in words
    assert cost["requests_at_risk"] == 48


def test_a_roll_loses_nothing_and_says_so():
    cost = restart_cost(preview("roll", ["prefill-0", "prefill-1"]), STARTS, 4.0, 30.0)
    assert "no request is refused" in cost["disruption"] and cost["requests_at_risk"] is None


def test_a_hold_says_new_requests_wait_and_where_they_get_503():
    cost = restart_cost(preview("hold", ["prefill-0"]), STARTS, 4.0, 30.0)
    assert "new requests wait in the proxy's queue for ~12.0 s" in cost["disruption"]
    assert "503 past its 30 s hold deadline" in cost["disruption"]


def test_no_measured_start_says_the_time_is_unknown_rather_than_guess():
    cost = restart_cost(preview("recreate", ["proxy", "decode-0"]), {}, 4.0, 30.0)
    assert "how long is unknown" in cost["disruption"] and cost["requests_at_risk"] is None
    assert "for their start time (not measured yet)" in cost["disruption"]


def test_nothing_to_restart_says_so():
    cost = restart_cost(preview("roll", []), STARTS, 4.0, 30.0)
    assert cost["disruption"].startswith("nothing restarts")
