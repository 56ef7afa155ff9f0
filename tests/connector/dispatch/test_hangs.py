"""Which instances are hung (connector/dispatch/hangs.py): judged by the instance, not the leg."""

from connector.dispatch.hangs import (
    GRACE_S_PER_ANSWER_TOKEN,
    UNBOUNDED_ANSWER_TOKENS,
    LegSeen,
    answer_grace,
    hung_instances,
    kv_lost,
    prompt_grace,
)

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


def test_a_long_prompt_lengthens_its_legs_wait_and_its_instances():
    """A lone long prefill (a 100k-token prompt on an idle engine) moves nothing for tens of
    seconds: its grace keeps it, and the short legs queued behind it, from being judged hung."""
    long = LegSeen("p", waiting_since=0.0, last_read=0.0, grace=prompt_grace(30_000))
    short = LegSeen("p", waiting_since=1.0, last_read=1.0, grace=prompt_grace(50))
    assert hung_instances([long], {}, now=35.0, first=FIRST) == set()
    assert hung_instances([long, short], {}, now=35.0, first=FIRST) == set()
    assert hung_instances([long, short], {}, now=40.5, first=FIRST) == {"p"}


def test_the_grace_is_a_floor_prefill_speed_not_a_second_timeout():
    assert prompt_grace(0) == 0.0 and prompt_grace(-3) == 0.0
    assert prompt_grace(100_000) == 100.0  # 1,000 tokens/s
    legs = [LegSeen("p", waiting_since=0.0, last_read=0.0, grace=prompt_grace(2_000))]
    assert hung_instances(legs, {}, now=12.5, first=FIRST) == {"p"}


def test_a_later_long_prompt_never_pushes_back_an_earlier_legs_deadline():
    short = LegSeen("p", waiting_since=0.0, last_read=0.0)
    long = LegSeen("p", waiting_since=5.0, last_read=5.0, grace=prompt_grace(30_000))
    assert hung_instances([long, short], {}, now=10.5, first=FIRST) == {"p"}


def test_an_answer_not_streamed_waits_by_its_bound_and_an_unbounded_one_by_a_context():
    assert answer_grace(True, 500) == 0.0  # streamed: its first token is its first byte
    assert answer_grace(False, 20) == 20 * GRACE_S_PER_ANSWER_TOKEN
    assert answer_grace(False, None) == UNBOUNDED_ANSWER_TOKENS * GRACE_S_PER_ANSWER_TOKEN
    assert answer_grace(False, None) > answer_grace(False, 4096)


def test_kv_is_lost_when_its_prefill_refused_after_answering_and_the_leg_is_overdue():
    # answered at 5.0, refused at 6.0, the leg due at 16.0
    assert kv_lost(refused_at=6.0, prefill_end=5.0, due=16.0, now=16.5)
    assert not kv_lost(refused_at=6.0, prefill_end=5.0, due=16.0, now=15.5)  # not yet due
    # refused before it answered: that prefill came back and prefilled this request since
    assert not kv_lost(refused_at=4.0, prefill_end=5.0, due=16.0, now=30.0)
    assert not kv_lost(refused_at=0.0, prefill_end=5.0, due=16.0, now=30.0)  # never refused
