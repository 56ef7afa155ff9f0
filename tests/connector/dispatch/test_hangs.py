"""Which instances are hung (connector/dispatch/hangs.py): judged by the instance, not the leg."""

from connector.dispatch.hangs import LegSeen, hung_instances

FIRST = 10.0


def test_a_leg_waiting_past_the_deadline_on_an_instance_that_moved_nothing_is_hung():
    legs = [LegSeen("p", waiting_since=0.0, last_read=0.0)]
    assert hung_instances(legs, {"p": -5.0}, now=10.5, first=FIRST) == {"p"}
    assert hung_instances(legs, {"p": -5.0}, now=9.5, first=FIRST) == set()


def test_an_instance_that_answered_another_leg_meanwhile_is_busy_not_hung():
    legs = [LegSeen("p", waiting_since=0.0, last_read=0.0)]
    assert hung_instances(legs, {"p": 4.0}, now=12.0, first=FIRST) == set()


def test_an_instance_streaming_another_request_is_busy_not_hung():
    legs = [
        LegSeen("d", waiting_since=0.0, last_read=0.0),
        LegSeen("d", waiting_since=None, last_read=11.5),
    ]
    assert hung_instances(legs, {}, now=12.0, first=FIRST) == set()


def test_streams_that_all_went_silent_make_their_instance_hung():
    legs = [LegSeen("d", None, 1.0), LegSeen("d", None, 1.5)]
    assert hung_instances(legs, {}, now=12.0, first=FIRST) == {"d"}
    assert hung_instances(legs, {"d": 3.0}, now=12.0, first=FIRST) == set()


def test_each_instance_is_judged_by_its_own_legs():
    legs = [
        LegSeen("p1", 0.0, 0.0),
        LegSeen("p2", 0.0, 0.0),
        LegSeen("d", None, 11.9),
    ]
    assert hung_instances(legs, {"p2": 5.0}, now=12.0, first=FIRST) == {"p1"}
