"""Burstiness measured live: `pdctl bench` offers gamma-distributed arrivals through a real proxy
to the tiny stand-in, and the advisor's live `burstiness` signal, read from the proxy's arrival
counters the way the scraper reads them, says whether the load was bursty or regular."""

from __future__ import annotations

import pytest

from harness.processes import metric_value, running, sim
from harness.stack import bench, proxy, wait_until
from observe.advice.signals import from_frame
from observe.build import arrivals, tracked
from observe.metrics.samples import parse
from observe.metrics.windows import Delta

pytestmark = pytest.mark.e2e

# 150 requests at 40 req/s: under 4 s a run; tiny answers so the stand-in keeps up.
LOAD = (
    "--request-rate",
    "40",
    "--num-prompts",
    "150",
    "--input-len",
    "16",
    "--output-len",
    "2",
    "--seed",
    "1",
)


def live_burstiness(tmp_path, shape: float) -> float:
    engine = sim(tmp_path, f"engine-{shape:g}")
    front = proxy(tmp_path, f"proxy-{shape:g}", "--mode", "colocated", "--instance", engine.url)
    with running(engine, front):
        bench(
            tmp_path,
            front.url,
            *LOAD,
            "--burstiness",
            str(shape),
            name=f"bench-{shape:g}",
            timeout=60,
        )
        wait_until(
            lambda: metric_value(front.metrics(), "pdctl_proxy_requests_total") >= 150,
            10,
            "the proxy recorded 150 requests",
        )
        counters = parse(front.metrics(), tracked).counters
    # A fresh proxy's counters are the window's increase: its first request has no gap.
    frame = {"window": "run", "arrivals": arrivals(Delta(0.0, counters))}
    assert frame["arrivals"]["gaps"] == 149
    d = from_frame(frame, topology="colocated")
    assert d.sources["burstiness"].startswith("proxy: gamma shape of arrival gaps")
    print(f"bench --burstiness {shape:g}: live burstiness {d.values['burstiness']:.3g}")
    return d.values["burstiness"]


def test_bursty_and_regular_bench_load_read_below_and_above_poisson(tmp_path):
    assert live_burstiness(tmp_path, 0.25) < 0.5  # the advisor's "bursty" line
    assert live_burstiness(tmp_path, 4.0) > 2.0
