"""Client requests arriving at the proxy: the gaps between them as count, sum and sum of squares,
from which observe/sections/traffic.py reads any window's burstiness."""

import asyncio
import time

import aiohttp
import pytest

from connector.measure.demand import ArrivalDemand
from connector.measure.metrics import ProxyMetrics
from harness.processes import metric_value
from tests.connector.fakes import FakeEngine, engines, run, running, settings_for
from tests.connector.test_proxy import post


def test_the_first_arrival_has_no_gap_and_later_ones_add_their_moments():
    metrics = ProxyMetrics()
    for now in (10.0, 10.5, 12.5):
        metrics.arrived(now)
    assert metrics.arrival_gaps == 2
    assert metrics.arrival_gap_seconds == pytest.approx(2.5)
    assert metrics.arrival_gap_seconds_squared == pytest.approx(0.5**2 + 2.0**2)


def test_the_proxy_exports_the_gaps_between_arrivals_whatever_their_outcome():
    sleeps = (0.02, 0.08, 0.01, 0.15, 0.05)

    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            payload = {"model": "tiny", "prompt": "x", "max_tokens": 2}
            start = time.perf_counter()
            for i, pause in enumerate((0.0, *sleeps)):
                await asyncio.sleep(pause)
                raw = b"{not json" if i == 3 else None  # invalid requests arrive too
                status, _, _ = await post(base, payload, raw=raw)
                assert status == (400 if i == 3 else 200)
            elapsed = time.perf_counter() - start
            async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
                return await r.text(), elapsed

    text, elapsed = run(body())
    n = metric_value(text, "pdctl_proxy_arrival_gaps_total")
    seconds = metric_value(text, "pdctl_proxy_arrival_gap_seconds_total")
    squares = metric_value(text, "pdctl_proxy_arrival_gap_seconds_squared_total")
    assert n == len(sleeps)
    # Sequential requests: each gap is its pause plus the request before it.
    assert sum(sleeps) <= seconds <= elapsed
    assert squares >= seconds**2 / n  # Cauchy-Schwarz: the variance is not negative
    assert squares > max(sleeps) ** 2


def test_arrival_demand_scales_each_estimate_by_what_finished_requests_used():
    demand = ArrivalDemand()
    demand.arrived(100, 50)  # no usage seen yet: the estimate as it is
    assert demand.tokens == {"prompt": 100.0, "output": 50.0}
    for _ in range(200):  # prompts are half what 4 characters a token says; answers stop at 40%
        demand.finished("prompt", 100, 50)
        demand.finished("output", 50, 20)
    assert demand.ratio["prompt"] == pytest.approx(0.5)
    assert demand.ratio["output"] == pytest.approx(0.4)
    demand.arrived(100, 50)
    assert demand.tokens == pytest.approx({"prompt": 150.0, "output": 70.0})


def test_arrival_demand_follows_a_workload_that_changes_within_dozens_of_requests():
    demand = ArrivalDemand()
    for _ in range(100):
        demand.finished("output", 100, 100)
    for _ in range(60):  # answers now stop at a tenth of max_tokens
        demand.finished("output", 100, 10)
    assert demand.ratio["output"] < 0.2


def test_arrival_demand_ignores_a_finish_without_usage_or_estimate():
    demand = ArrivalDemand()
    demand.finished("prompt", 100, None)
    demand.finished("prompt", 0, 30)
    demand.finished("prompt", 10, -1)
    assert demand.ratio == {"prompt": 1.0, "output": 1.0}


def test_the_proxy_exports_the_tokens_arriving_requests_bring_scaled_by_their_usage():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            # 40 characters: 10 tokens by the estimate; the fake engines count 5
            payload = {"model": "tiny", "prompt": "x" * 40, "max_tokens": 4, "stream": True}
            usage = {"stream_options": {"include_usage": True}}
            for ask in (usage, usage, {}):  # the last counts its token events: no usage
                status, _, _ = await post(base, {**payload, **ask})
                assert status == 200
            async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
                return await r.text()

    text = run(body())
    ratio = metric_value(text, "pdctl_proxy_arrived_tokens_ratio", kind="prompt")
    assert ratio == pytest.approx(0.5)
    prompt = metric_value(text, "pdctl_proxy_arrived_tokens_total", kind="prompt")
    assert prompt == pytest.approx(10 + 5 + 5)  # the first arrived before any usage
    output = metric_value(text, "pdctl_proxy_arrived_tokens_total", kind="output")
    assert output == pytest.approx(12)  # every answer had the 4 tokens asked
    assert metric_value(text, "pdctl_proxy_arrived_tokens_ratio", kind="output") == 1.0
