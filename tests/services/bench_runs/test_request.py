"""A dashboard bench request becomes one `pdctl bench` argv: every value after `=` of its flag,
the deployment's SLOs where the request left them out, and a deadline past its arrivals."""

from __future__ import annotations

from pathlib import Path

from services.bench_runs.request import GRACE_S, BenchRequest, bench_argv
from state.store import Current
from tests.specs import colocated, spec


def current(**over: object) -> Current:
    return Current("solo", 4, None, None, spec(colocated("solo", **over)), None, "alice", None)


def test_the_argv_carries_every_setting_as_flag_equals_value() -> None:
    body = BenchRequest(rates=[2, 4.5], num_prompts=10, slo_itl_ms=80, seed=7)
    settings = body.settings(current(slo={"ttft_ms": 900, "itl_ms": 50, "itl_stat": "max"}))
    argv = bench_argv(settings, "http://127.0.0.1:41000", Path("/tmp/run"))
    assert argv[2] == "bench" and all(a.startswith("--") for a in argv[3:])
    flags = dict(a[2:].split("=", 1) for a in argv[3:] if "=" in a)
    assert flags["request-rate"] == "2.0,4.5" and flags["num-prompts"] == "10"
    assert flags["slo-ttft-ms"] == "900.0" and flags["slo-itl-ms"] == "80.0"
    assert flags["itl-slo-stat"] == "max" and flags["seed"] == "7"
    assert flags["progress-file"] == "/tmp/run/progress.json"
    assert "--quiet" in argv


def test_no_slo_flag_where_the_deployment_has_none() -> None:
    settings = BenchRequest(rates=[1]).settings(current(slo={"ttft_ms": None, "itl_ms": None}))
    argv = bench_argv(settings, "http://127.0.0.1:41000", Path("/tmp/run"))
    assert not [a for a in argv if a.startswith("--slo-")]


def test_the_deadline_covers_arrivals_and_a_grace_per_rate() -> None:
    body = BenchRequest(rates="2, 4", num_prompts=20)
    assert body.rates == [2.0, 4.0] and body.total == 40
    assert body.deadline_s() == 20 / 2 + 20 / 4 + 2 * GRACE_S + 10
