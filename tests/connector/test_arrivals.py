"""Client requests arriving at the proxy: the gaps between them as count, sum and sum of squares,
from which observe/build.py reads any window's burstiness."""

import asyncio
import time

import aiohttp
import pytest

from connector.metrics import ProxyMetrics
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
