"""The P:D ratio autopilot's decision (pure, controller/autopilot/decide.py) and its spec section
(controller/spec/sections/autopilot.py): both directions, nothing when both or neither side is
bound, hysteresis over the whole window, and every guard rail.
tests/e2e/rollout/test_autopilot.py runs it."""

from __future__ import annotations

import pytest

from controller.autopilot.decide import Sample, bound, decide, sample
from controller.spec.deployment import DeploymentSpec
from controller.spec.field_error import FieldError
from controller.spec.rules import check
from controller.spec.sections.autopilot import Autopilot

AP = Autopilot(window_s=60, cooldown_s=300, max_moves_per_hour=2)
ROLES = {"prefill-0": "prefill", "prefill-1": "prefill", "decode-0": "decode", "decode-1": "decode"}
NOW = 10_000.0


def s(ts: float, **over) -> Sample:
    """A loaded sample meeting every line unless `over` says otherwise."""
    base = dict(
        ts=ts,
        requests=20.0,
        slo_attainment=0.5,
        ttft_p90_s=0.5,
        itl_p90_s=0.02,
        slo_ttft_s=1.0,
        slo_itl_s=0.05,
        prefills=2,
        decodes=2,
        prefill_waiting=0,
        decode_running=4,
        decode_waiting=0,
        decode_kv_usage=0.3,
        decode_slots=64,
    )
    return Sample(**{**base, **over})


def window(span: float = 60, step: float = 1, **over) -> list[Sample]:
    return [s(NOW - span + i * step, **over) for i in range(int(span / step) + 1)]


TTFT_BOUND = {"ttft_p90_s": 2.5}
ITL_BOUND = {"itl_p90_s": 0.09}
IDLE = {"requests": 0.0, "ttft_p90_s": None, "itl_p90_s": None, "slo_attainment": None}


def test_ttft_bound_for_a_whole_window_moves_one_decode_to_prefill():
    d = decide(AP, window(**TTFT_BOUND), ROLES, [], NOW, load={"decode-0": 1, "decode-1": 3})
    assert (d.kind, d.bound, d.source, d.target, d.instance) == (
        "move",
        "ttft",
        "decode",
        "prefill",
        "decode-0",
    )
    assert d.numbers["ttft_p90_s_min"] == 2.5 and d.numbers["ttft_bound_samples"] == 61
    assert d.numbers["slo_attainment_mean"] == 0.5


def test_a_prefill_queue_alone_makes_it_ttft_bound():
    assert bound(s(0, prefill_waiting=4), AP) == "ttft"
    assert bound(s(0, prefill_waiting=3), AP) is None  # 2 per prefill, 2 prefills


def test_itl_bound_moves_one_prefill_to_decode():
    d = decide(AP, window(**ITL_BOUND), ROLES, [], NOW)
    assert (d.kind, d.bound, d.source, d.target) == ("move", "itl", "prefill", "decode")
    assert d.instance == "prefill-1"  # ties: the last by name
    for over in ({"decode_running": 58}, {"decode_kv_usage": 0.95}):
        assert bound(s(0, **over), AP) == "itl"
    # requests waiting for their KV count as waiting on a decode: a few say nothing
    assert bound(s(0, decode_waiting=3, **TTFT_BOUND), AP) == "ttft"
    # finishing in a burst: few running for a moment, many waiting
    assert bound(s(0, decode_running=11, decode_waiting=39, decode_slots=16), AP) == "itl"
    # first tokens late because the decodes are full: the decodes' shortage
    assert bound(s(0, decode_running=60, **TTFT_BOUND), AP) == "itl"
    assert bound(s(0, decode_running=60, prefill_waiting=4), AP) is None  # both short
    assert bound(s(0, decode_running=60, decode_slots=0), AP) is None  # slots unknown


def test_nothing_when_both_or_neither_side_is_bound_or_idle():
    for over in ({**TTFT_BOUND, **ITL_BOUND}, {}, IDLE):
        d = decide(AP, window(**over), ROLES, [], NOW)
        assert d.kind == "none" and d.instance is None, over
    assert "neither" in decide(AP, window(), ROLES, [], NOW).why


def test_idle_samples_say_nothing_but_must_not_be_most_of_the_window():
    samples = window(**TTFT_BOUND)
    for i in range(0, len(samples), 3):  # no first token in those 10 s, no queue
        samples[i] = s(samples[i].ts, **IDLE)
    assert decide(AP, samples, ROLES, [], NOW).kind == "move"
    for i in range(0, len(samples), 3):
        samples[i + 1 if i + 1 < len(samples) else i] = s(samples[i].ts, **IDLE)
    assert decide(AP, samples, ROLES, [], NOW).kind == "none"


def test_one_bad_sample_or_a_short_window_moves_nothing():
    samples = window(**TTFT_BOUND)
    samples[30] = s(samples[30].ts)  # one sample fine in the middle
    d = decide(AP, samples, ROLES, [], NOW)
    assert d.kind == "none" and "did not hold" in d.why
    d = decide(AP, window(span=40, **TTFT_BOUND), ROLES, [], NOW)
    assert d.kind == "none" and "not 60 s of samples" in d.why
    # samples older than the window do not count against it
    old = [s(NOW - 200 + i) for i in range(100)]
    assert decide(AP, old + window(**TTFT_BOUND), ROLES, [], NOW).kind == "move"


def test_met_attainment_moves_nothing_however_bound():
    d = decide(AP, window(slo_attainment=0.95, **TTFT_BOUND), ROLES, [], NOW)
    assert d.kind == "none" and d.bound == "ttft" and "meets" in d.why


def test_a_move_switch_or_restart_under_way_holds():
    d = decide(AP, window(**TTFT_BOUND), ROLES, [], NOW, busy="a mode switch runs")
    assert (d.kind, d.source, d.instance) == ("held", "decode", None)
    assert "a mode switch runs" in d.why


def test_cooldown_since_the_last_move_holds():
    d = decide(AP, window(**TTFT_BOUND), ROLES, [NOW - 100], NOW)
    assert d.kind == "held" and "cooldown" in d.why
    assert decide(AP, window(**TTFT_BOUND), ROLES, [NOW - 301], NOW).kind == "move"


def test_the_hourly_budget_holds():
    moves = [NOW - 3000, NOW - 1000]
    d = decide(AP, window(**TTFT_BOUND), ROLES, moves, NOW)
    assert d.kind == "held" and "budget: 2 moves" in d.why
    assert decide(AP, window(**TTFT_BOUND), ROLES, [NOW - 3700, NOW - 1000], NOW).kind == "move"


def test_each_role_keeps_its_minimum():
    roles = {**ROLES, "decode-1": "prefill"}  # 3P1D: no decode to spare
    d = decide(AP, window(**TTFT_BOUND), roles, [], NOW)
    assert d.kind == "held" and "min_per_role: decode would keep 0" in d.why
    two = Autopilot(min_per_role=2)
    d = decide(two, window(**ITL_BOUND), ROLES, [], NOW)
    assert d.kind == "held" and "prefill would keep 1, 2 needed" in d.why


def test_a_frame_becomes_a_sample_per_serving_role():
    frame = {
        "slo": {"ttft_ms": 1000.0, "itl_ms": 50.0},
        "slo_attainment": 0.4,
        "ttft": {"count": 12, "p90": 1.8},
        "itl": {"count": 300, "p90": 0.01},
        "instances": [
            {"name": "prefill-0", "role": "prefill", "waiting": 3, "running": 1},
            {"name": "decode-1", "role": "prefill", "waiting": 2, "running": 0},
            {
                "name": "decode-0",
                "role": "decode",
                "waiting": 0,
                "running": 5,
                "kv_cache_usage": 0.4,
            },
        ],
    }
    got = sample(frame, 5.0, {"decode-0": 16, "prefill-0": 16})
    assert (got.prefills, got.decodes, got.prefill_waiting, got.decode_running) == (2, 1, 5, 5)
    assert (got.slo_ttft_s, got.ttft_p90_s, got.decode_kv_usage) == (1.0, 1.8, 0.4)
    assert got.decode_slots == 16 and sample(frame, 5.0).decode_slots == 0


def spec(**changes) -> dict:
    return {
        "name": "auto",
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "groups": [
            {"name": "prefill", "role": "prefill", "count": 2},
            {"name": "decode", "role": "decode", "count": 2},
        ],
        "role_switch": {},
        **changes,
    }


def checked(body: dict) -> DeploymentSpec:
    parsed = DeploymentSpec.model_validate(body)
    check(parsed)
    return parsed


def test_the_spec_takes_an_autopilot_with_role_switch():
    got = checked(spec(autopilot={"dry_run": True}))
    assert got.autopilot.enabled and got.autopilot.dry_run and got.autopilot.window_s == 60
    assert checked(spec()).autopilot is None


def test_an_autopilot_without_role_switch_names_the_field():
    body = spec(autopilot={})
    del body["role_switch"]
    with pytest.raises(FieldError) as caught:
        checked(body)
    assert caught.value.loc == ("autopilot",) and "role_switch" in caught.value.message
    with pytest.raises(FieldError) as caught:
        checked(spec(autopilot={"min_per_role": 2}))
    assert caught.value.loc == ("autopilot", "min_per_role")


@pytest.mark.parametrize(
    "field,value",
    [
        ("window_s", 1),
        ("window_s", "soon"),
        ("cooldown_s", -1),
        ("min_per_role", 0),
        ("max_moves_per_hour", 0),
        ("max_moves_per_hour", 1000),
        ("attainment_target", 1.5),
        ("kv_usage_high", 0),
        ("drain_timeout_s", 0),
        ("demand_high", 0),
        ("lead_window_s", 1),
        ("lead_from_arrivals", "often"),
        ("enabled", "maybe"),
        ("sometimes", True),
    ],
)
def test_every_bad_autopilot_value_names_its_field(field, value):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        DeploymentSpec.model_validate(spec(autopilot={field: value}))
    assert caught.value.errors()[0]["loc"] == ("autopilot", field)


class LinearCapacity:
    """A prefill computes 1,000 prompt tokens a second; a decode gives 100 answer tokens a
    second (over all its sequences)."""

    source = "linear test model"

    def prefill_seconds(self, prompt: float) -> float:
        return prompt / 1000

    def decode_seconds(self, prompt: float, output: float) -> float:
        return output / 100


CAP = LinearCapacity()


def arriving(rate: float, prompt: int, output: int) -> dict:
    return {
        "arrivals_per_s": rate,
        "prompt_tokens_per_s": rate * prompt,
        "output_tokens_per_s": rate * output,
    }


LONG_PROMPTS = arriving(1.0, 2400, 8)  # 2.4 prefills and 0.08 decodes needed
LONG_ANSWERS = arriving(1.0, 100, 150)  # 0.1 prefills and 1.5 decodes needed


def test_arrivals_that_outrun_the_prefills_move_a_decode_before_any_backlog_shows():
    d = decide(AP, window(slo_attainment=1.0, **LONG_PROMPTS), ROLES, [], NOW, capacity=CAP)
    assert (d.kind, d.bound, d.source, d.target) == ("move", "ttft", "decode", "prefill")
    assert "need 2.4 prefills and 0.1 decodes, 2 and 2 serve" in d.why
    demand = d.numbers["demand"]
    assert demand["prefill_share"] == 1.2 and demand["capacity"] == "linear test model"
    assert demand["prompt_tokens_mean"] == 2400 and demand["arrivals_per_s"] == 1.0


def test_arrivals_that_outrun_the_decodes_move_a_prefill_back():
    roles = {**ROLES, "decode-1": "prefill"}  # 3P1D after a phase of long prompts
    d = decide(AP, window(**LONG_ANSWERS), roles, [], NOW, capacity=CAP)
    assert (d.kind, d.bound, d.source, d.target) == ("move", "itl", "prefill", "decode")
    assert d.instance == "prefill-1"


def test_arrivals_a_ratio_already_serves_move_nothing():
    d = decide(AP, window(**LONG_ANSWERS), ROLES, [], NOW, capacity=CAP)  # 2 decodes: 0.75
    assert d.kind == "none"
    over_both = arriving(1.0, 2400, 300)  # 2.4 prefills and 3 decodes: moving cannot help
    assert decide(AP, window(**over_both), ROLES, [], NOW, capacity=CAP).kind == "none"
    # the other side would be short after giving one up: 1.2 prefills from 1
    tight = arriving(1.0, 1200, 300)
    assert decide(AP, window(**tight), ROLES, [], NOW, capacity=CAP).kind == "none"


def test_the_arrivals_lead_only_with_a_model_a_whole_window_and_enough_requests():
    assert decide(AP, window(**LONG_PROMPTS), ROLES, [], NOW).kind == "none"  # no capacity
    assert decide(AP, window(span=40, **LONG_PROMPTS), ROLES, [], NOW, capacity=CAP).kind == (
        "none"
    )
    sparse = arriving(0.1, 24000, 8)  # 6 requests in the window
    assert decide(AP, window(**sparse), ROLES, [], NOW, capacity=CAP).kind == "none"
    off = Autopilot(window_s=60, lead_from_arrivals=False)
    assert decide(off, window(**LONG_PROMPTS), ROLES, [], NOW, capacity=CAP).kind == "none"


def test_a_backlog_on_the_giving_role_holds_the_lead():
    # the decodes are saturated now: they give nothing away, whatever the arrivals say
    d = decide(AP, window(decode_running=60, **LONG_PROMPTS), ROLES, [], NOW, capacity=CAP)
    assert d.kind == "none" and d.source == "prefill"  # and the backlog's move is vetoed
    assert "not made: the arrivals need 2.4 prefills" in d.why
    roles = {**ROLES, "decode-1": "prefill"}
    # a prefill queue left from the last phase: no prefill leaves until it clears
    d = decide(AP, window(prefill_waiting=9, **LONG_ANSWERS), roles, [], NOW, capacity=CAP)
    assert d.kind == "none"


def test_the_arrivals_lead_still_respects_every_guard_rail():
    d = decide(AP, window(**LONG_PROMPTS), ROLES, [NOW - 100], NOW, capacity=CAP)
    assert d.kind == "held" and "cooldown" in d.why and "need 2.4 prefills" in d.why


def test_a_backlog_led_move_the_arrivals_say_would_leave_its_source_short_is_not_made():
    # ITL-bound by the backlog, but the arrivals need 1.2 prefills: one would be short
    d = decide(AP, window(**ITL_BOUND, **arriving(1.0, 1200, 8)), ROLES, [], NOW, capacity=CAP)
    assert (d.kind, d.bound, d.source) == ("none", "itl", "prefill")
    assert "not made: the arrivals need 1.2 prefills, 1 would be left" in d.why
    # where they need less, the backlog's move stands
    d = decide(AP, window(**ITL_BOUND, **arriving(1.0, 200, 8)), ROLES, [], NOW, capacity=CAP)
    assert d.kind == "move" and d.source == "prefill"


def test_a_frame_s_arrivals_reach_the_sample():
    frame = {"arrivals": {"per_s": 2.0, "prompt_tokens_per_s": 900.0, "output_tokens_per_s": 64}}
    got = sample(frame, 1.0)
    assert (got.arrivals_per_s, got.prompt_tokens_per_s, got.output_tokens_per_s) == (
        2.0,
        900.0,
        64,
    )
    assert sample({}, 1.0).arrivals_per_s is None


def test_a_queue_the_arrivals_alone_would_not_explain_counts_toward_its_role():
    # 2 decodes serve the arrivals (0.75 each), but 40 requests wait at them: each costs 1.5
    # decode-seconds, cleared within the 60 s window that is one more decode's worth
    samples = window(decode_waiting=40, **LONG_ANSWERS)
    d = decide(AP, samples, ROLES, [], NOW, capacity=CAP)
    assert (d.kind, d.source, d.target) == ("move", "prefill", "decode")
    demand = d.numbers["demand"]
    assert demand["decodes_for_queue"] == 1.0 and demand["decodes_needed"] == 2.5
    assert decide(AP, window(**LONG_ANSWERS), ROLES, [], NOW, capacity=CAP).kind == "none"


def test_the_mix_is_read_over_the_newest_half_window_so_a_shift_is_followed_sooner():
    roles = {**ROLES, "decode-1": "prefill"}  # 3P1D from the long prompts before
    before = [s(NOW - 60 + i, **LONG_PROMPTS) for i in range(30)]
    after = [s(NOW - 30 + i, **LONG_ANSWERS) for i in range(31)]
    d = decide(AP, before + after, roles, [], NOW, capacity=CAP)
    assert (d.kind, d.source, d.target) == ("move", "prefill", "decode")
    assert d.numbers["demand"]["output_tokens_mean"] == 150
    whole = Autopilot(window_s=60, cooldown_s=300, max_moves_per_hour=2, lead_window_s=60)
    assert decide(whole, before + after, roles, [], NOW, capacity=CAP).kind == "none"
