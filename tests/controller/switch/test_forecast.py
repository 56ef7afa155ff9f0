"""Each strategy's forecast from fake start times: pure."""

import pytest

from controller.rollout.record import RolloutRecord as SwitchRecord
from controller.switch.forecast import Costs, StartEstimate, forecast, forecasts, measured_or
from controller.switch.preview import measured_drain, modelled_start, start_estimates
from tests.controller.factories import moriio_pairs

COSTS = Costs(drain_s=2.0, stop_s=0.5, ready_lag_s=1.0)


def starts(prefill: float, decode: float, pairs: int = 1) -> dict[str, StartEstimate]:
    if pairs == 1:
        return {"prefill": StartEstimate(prefill, "fake"), "decode": StartEstimate(decode, "fake")}
    out = {}
    for i in range(pairs):
        out[f"prefill-{i}"] = StartEstimate(prefill, "fake")
        out[f"decode-{i}"] = StartEstimate(decode, "fake")
    return out


def test_hold_takes_the_drain_then_both_sides_restarting_together():
    f = forecast(moriio_pairs(1), "write", "hold", starts(10.0, 20.0), COSTS)
    assert f.duration_s == pytest.approx(2.0 + 0.5 + 20.0 + 1.0)
    assert f.held_s == pytest.approx(f.duration_s) and f.degraded_s is None
    assert f.warnings == [] and f.rejected_window_s == 0


def test_a_hold_longer_than_the_deadline_warns_of_503s():
    f = forecast(moriio_pairs(1), "write", "hold", starts(120.0, 125.0), COSTS, rate=10.0)
    assert f.held_s == pytest.approx(128.5)
    assert f.rejected_window_s == pytest.approx(128.5 - 30.0)
    assert "longer than the proxy's hold deadline (30 s)" in f.warnings[0]
    assert "get 503" in f.warnings[0] and "at 10 req/s" in f.warnings[0]
    assert "hold queue's 256" in f.warnings[1]  # 10 req/s x 30 s > 256


def test_keep_serving_restarts_one_side_after_the_other_and_holds_nothing():
    f = forecast(moriio_pairs(1), "write", "keep-serving", starts(10.0, 20.0), COSTS)
    assert f.duration_s == pytest.approx((2.0 + 0.5 + 10.0 + 1.0) + (2.0 + 0.5 + 20.0 + 1.0))
    assert f.held_s is None and f.degraded_s == pytest.approx(f.duration_s)
    assert f.warnings == [] and "whole requests" in f.notes[0]


def test_roll_restarts_pair_by_pair_and_is_refused_with_one_pair():
    f = forecast(moriio_pairs(2), "write", "roll", starts(10.0, 20.0, pairs=2), COSTS)
    assert f.duration_s == pytest.approx(2 * (2.0 + 0.5 + 20.0 + 1.0))
    one = forecast(moriio_pairs(1), "write", "roll", starts(1.0, 1.0), COSTS)
    assert not one.possible and "has 1 prefill and 1 decode instance(s)" in one.refused


def test_roll_is_possible_on_one_group_with_count_two_per_role():
    f = forecast(moriio_pairs(1, count=2), "write", "roll", starts(10.0, 20.0), COSTS)
    assert f.possible and f.refused is None
    assert f.duration_s == pytest.approx(2 * (2.0 + 0.5 + 20.0 + 1.0))
    assert f.held_s is None and "nothing is held" in f.notes[-1]


def test_every_strategy_is_forecast_and_an_unknown_drain_is_said():
    out = forecasts(moriio_pairs(1), "write", starts(1.0, 1.0), Costs())
    assert [f.strategy for f in out] == ["roll", "hold", "keep-serving"]
    assert "not counted" in out[1].notes[0]


def test_measured_starts_win_over_the_model_by_their_median():
    modelled = StartEstimate(99.0, "modelled")
    assert measured_or([], modelled) is modelled
    got = measured_or([3.0, 5.0, 40.0], modelled)
    assert got.seconds == 5.0 and got.source == "measured"


def test_the_stand_in_start_is_the_model_scaled_plus_its_own():
    spec = moriio_pairs(1).model_copy(update={"start_time_scale": 0.1, "time_scale": 2.0})
    est = modelled_start(spec, 1)
    instant = modelled_start(moriio_pairs(1), 1)
    assert instant.seconds == pytest.approx(0.5)
    assert est.seconds == pytest.approx(0.5 + 0.2 * 47.0, rel=0.05)
    assert est.source == "modelled" and "tiny on 1 x cpu" in est.detail
    measured = start_estimates(spec, {"prefill": [2.0]})
    assert measured["prefill"].source == "measured" and measured["decode"].source == "modelled"


def test_the_drain_is_the_median_wait_of_finished_switches():
    def rec(state, seconds):
        r = SwitchRecord("r1", "mori", "write", "hold", "a", None, [], state=state)
        r.timings = [{"step": "wait_idle prefill-0", "seconds": seconds}]
        return r

    assert measured_drain([]) is None
    assert measured_drain([rec("done", 1.0), rec("done", 3.0), rec("failed", 50.0)]) == 2.0
