"""`pdctl bench --deployment NAME` hands the finished run to the control plane that stores the
deployment (bench/target.py's keeper), which lists it in the page's Bench panel; a refusal is
a warning and the measurement stands."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from bench import target
from bench.cli import run_settings
from bench.config import BenchConfig
from domain.measures.slo import SloTargets
from terminal.verbs.bench_target import summaries_only
from tests.bench.sse_server import FakeEngine, serving_in_thread
from tests.bench.test_cli import SMALL, _invoke


@pytest.fixture
def kept() -> Iterator[list[tuple[dict[str, Any], dict[str, Any]]]]:
    saved = list(target._resolver)  # our own module's hook: put back as found
    yield []
    target._resolver[:] = saved


def resolve_to(url: str, keep: target.Keeper) -> None:
    target.use_resolver(lambda name, server: target.DeploymentTarget(url, SloTargets(), keep))


def test_a_deployment_run_is_handed_back_with_its_settings(kept) -> None:
    def keep(settings: dict[str, Any], result: dict[str, Any]) -> str:
        kept.append((settings, result))
        return "kept as bench run 7 of demo (revision 3): its page's Bench panel"

    with serving_in_thread(FakeEngine()) as url:
        resolve_to(url, keep)
        result = _invoke("--deployment", "demo", *SMALL, "--request-rate", "50")
    assert result.exit_code == 0, result.output
    assert "kept as bench run 7 of demo" in result.stderr
    [(settings, document)] = kept
    assert settings["rates"] == [50.0] and settings["num_prompts"] == 4
    assert document["completed"] == 4 and document["request_rate"] == 50.0


def test_a_refused_keep_is_a_warning_and_the_measurement_stands(kept) -> None:
    def keep(settings: dict[str, Any], result: dict[str, Any]) -> str:
        raise target.TargetUnresolved("403: bob may only read", 4)

    with serving_in_thread(FakeEngine()) as url:
        resolve_to(url, keep)
        result = _invoke("--deployment", "demo", *SMALL, "--request-rate", "50")
    assert result.exit_code == 0, result.output
    assert "not kept by the control plane: 403: bob may only read" in result.stderr
    assert "pdctl bench @ 50 req/s" in result.stdout and "Successful requests" in result.stdout


def test_a_base_url_run_is_kept_by_no_one(kept) -> None:
    def keep(settings: dict[str, Any], result: dict[str, Any]) -> str:
        kept.append((settings, result))
        return "kept"

    with serving_in_thread(FakeEngine()) as url:
        resolve_to(url, keep)
        result = _invoke("--base-url", url, *SMALL, "--request-rate", "50")
    assert result.exit_code == 0, result.output
    assert kept == []


def test_settings_say_inf_as_the_api_takes_it() -> None:
    config = BenchConfig("http://x", request_rates=(math.inf, 2.0))
    assert run_settings(config)["rates"] == ["inf", 2.0]
    assert run_settings(config)["itl_slo_stat"] == "p99"


def test_per_request_records_are_not_sent() -> None:
    one = {"request_rate": 1.0, "completed": 2, "ttfts": [0.1, 0.2], "requests": [{}, {}]}
    assert summaries_only(one) == {"request_rate": 1.0, "completed": 2}
    sweep = {"max_goodput_rate": 1.0, "runs": [one, one]}
    assert summaries_only(sweep)["runs"] == [{"request_rate": 1.0, "completed": 2}] * 2
