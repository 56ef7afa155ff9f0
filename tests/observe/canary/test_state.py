"""The correctness canary's pure core: the comparison, the reference set, scheduling, events."""

import pytest

from observe.canary.state import (
    MAX_REFERENCES,
    CanaryState,
    Difference,
    Verdict,
    answer_tokens,
    due,
    first_difference,
    judge,
    request_body,
    section,
    step,
)

REF = ["ba", "be", "bi", "bo", "bu"]


def test_first_difference_names_the_index_and_both_tokens():
    assert first_difference(REF, REF) is None
    assert first_difference(REF, ["ba", "be", "XX", "bo", "bu"]) == Difference(2, "bi", "XX")
    assert first_difference(REF, REF[:3]) == Difference(3, "bo", None)  # stopped short
    assert first_difference(REF[:3], REF) == Difference(3, None, "bo")
    # only the first K tokens compared: a later divergence is not a difference
    assert first_difference(REF, ["ba", "be", "bi", "ZZ", "ZZ"], compare_tokens=3) is None


def test_a_matching_answer_is_ok_without_asking_the_prefill_again():
    assert judge([REF], REF, None) == ("ok", None, [REF])
    with pytest.raises(ValueError, match="fresh"):
        judge([REF], ["x"], None)


def test_a_wrong_answer_against_a_fresh_colocated_one_is_a_mismatch():
    result, diff, refs = judge([REF], ["ba", "XX", "bi", "bo", "bu"], REF)
    assert (result, diff, refs) == ("mismatch", Difference(1, "be", "XX"), [REF])


def test_an_answer_the_model_gives_colocated_too_is_accepted_as_a_new_reference():
    moved = ["ba", "be", "bi", "bo", "ka"]  # e.g. another batching on a real engine
    result, diff, refs = judge([REF], moved, moved)
    assert (result, diff, refs) == ("ok", None, [moved, REF])
    many = [[str(i)] for i in range(MAX_REFERENCES)]
    assert len(judge(many, ["new"], ["new"])[2]) == MAX_REFERENCES  # bounded


def test_due_every_interval_and_never_when_off():
    assert due(None, 30, 0.0) and not due(10.0, 30, 39.9) and due(10.0, 30, 40.0)
    assert not due(None, 0, 100.0)


def test_the_body_is_greedy_fixed_length_and_whole():
    body = request_body("tiny", 16)
    assert body["temperature"] == 0 and body["max_tokens"] == 16 and body["ignore_eos"]
    assert body["stream"] is False
    assert answer_tokens({"choices": [{"text": " ba be"}]}) == ["ba", "be"]
    assert answer_tokens({"error": {}}) is None and answer_tokens(None) is None


def bad(at: float, pair=("p0", "d0")) -> Verdict:
    return Verdict("mismatch", at, *pair, Difference(4, "bu", "ka"))


def test_one_event_per_onset_and_per_recovery_of_a_pair():
    state, moved = step(CanaryState(), Verdict("ok", 1.0, "p0", "d0"))
    assert moved == [] and state.counts["ok"] == 1
    state, moved = step(state, bad(2.0))
    [onset] = moved
    assert onset.kind == "canary.mismatch"
    assert "prefill p0 and decode d0" in onset.message
    assert "token 4: expected 'bu', got 'ka'" in onset.message
    assert onset.detail["first_difference"] == {"index": 4, "expected": "bu", "got": "ka"}
    state, moved = step(state, bad(3.0))
    assert moved == [] and state.counts["mismatch"] == 2  # still failing: counted, no event
    state, moved = step(state, bad(3.5, ("p0", "d1")))
    assert [t.kind for t in moved] == ["canary.mismatch"]  # another pair fails too
    state, moved = step(state, Verdict("error", 4.0, note="proxy down"))
    assert moved == [] and state.counts["error"] == 1 and len(state.failing) == 2
    state, moved = step(state, Verdict("ok", 9.0, "p0", "d0"))
    [recovered] = moved
    assert recovered.kind == "canary.recovered" and "failing for 7 s" in recovered.message


def test_the_section_shows_the_last_verdict_or_why_not():
    state, _ = step(CanaryState(), bad(2.0))
    shown = section(state, 30, True, None)
    assert shown["applies"] and shown["last"]["result"] == "mismatch"
    assert shown["failing"] == [{"prefill": "p0", "decode": "d0", "since": 2.0}]
    assert section(None, 0, True, None)["why"] == "off (canary.interval_s is 0)"
    colocated = section(None, 30, False, "colocated: no hand-off to check")
    assert not colocated["applies"] and colocated["why"].startswith("colocated")


def test_the_line_says_failing_beside_the_slo_figures():
    state, _ = step(CanaryState(), bad(0.0))
    shown = section(state, 30, True, None)
    assert shown["state"] == "failing"
    assert shown["line"] == (
        "canary FAILING since 00:00:00 UTC: the answer through prefill p0 and decode d0 "
        "differs from the model's colocated answer at token 4 (expected 'bu', got 'ka'); "
        "attainment counts these 200s as met"
    )
    assert section(CanaryState(), 30, True, None)["line"] == "canary: first check within 30 s"
    state, _ = step(CanaryState(), Verdict("ok", 60.0, "p0", "d0"))
    assert section(state, 30, True, None)["state"] == "ok"
    state, _ = step(state, Verdict("error", 61.0, note="the proxy answered 503"))
    assert section(state, 30, True, None)["line"].endswith("the proxy answered 503")
