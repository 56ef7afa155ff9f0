"""The stand-in's modelled API server CPU: charged per request, text prompt token and output
token, never faster than one core, nothing per token for a prompt sent as token ids."""

import itertools

import pytest

from domain.engine.frontend_cost import FrontendCost
from simulator.model.frontend_clock import FrontendClock, parse_cost
from tests.clock import ManualClock

COST = FrontendCost(base_ms=2.0, prompt_us=10.0, output_us=300.0)


def test_an_idle_frontend_spends_what_it_was_charged() -> None:
    clock = ManualClock()
    frontend = FrontendClock(COST, clock)
    frontend.request(1000)  # 2 ms + 10 ms
    frontend.output(10)  # 3 ms
    clock.now += 1.0
    assert frontend.cpu_seconds() == pytest.approx(0.015)


def test_token_id_prompts_cost_the_request_only() -> None:
    clock = ManualClock()
    frontend = FrontendClock(COST, clock)
    frontend.request(0)
    clock.now += 1.0
    assert frontend.cpu_seconds() == pytest.approx(0.002)


def test_work_faster_than_one_core_waits_its_turn() -> None:
    clock = ManualClock()
    frontend = FrontendClock(COST, clock)
    for _ in range(100):
        frontend.request(10_000)  # 102 ms each: 10.2 s of work arriving at once
    readings = []
    for _ in range(12):
        readings.append(frontend.cpu_seconds())
        clock.now += 1.0
    steps = [b - a for a, b in itertools.pairwise(readings)]
    assert readings[0] == pytest.approx(0.0, abs=1e-9)
    assert all(step <= 1.0 + 1e-9 for step in steps), steps
    assert readings == sorted(readings)
    assert readings[-1] == pytest.approx(10.2)


def test_a_saturated_frontend_reads_one_core() -> None:
    clock = ManualClock()
    frontend = FrontendClock(COST, clock)
    before = frontend.cpu_seconds()
    for _ in range(200):  # 12 ms of work every 10 ms, for 2 s
        frontend.request(1000)
        clock.now += 0.01
    assert frontend.cpu_seconds() - before == pytest.approx(2.0, abs=0.02)


def test_parse_cost_reads_three_numbers() -> None:
    assert parse_cost("2.1,40,297") == FrontendCost(2.1, 40.0, 297.0)
    assert parse_cost("0,0,0") == FrontendCost(0.0, 0.0, 0.0)


@pytest.mark.parametrize("value", ["", "1,2", "1,2,3,4", "a,b,c", "1,-2,3", "nan,1,1", "1e9,1,1"])
def test_parse_cost_names_the_flag(value: str) -> None:
    with pytest.raises(ValueError, match="--frontend-cost must be BASE_MS,PROMPT_US,OUTPUT_US"):
        parse_cost(value)
