"""Schemathesis against a real `pdctl serve` on loopback: every operation in /openapi.json, fed
generated (valid and invalid) inputs, answers without a 5xx and within its documented schema.

Bounded: a few examples per operation, no example database, a deadline per call."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from harness.processes import Process, free_port, http_get, http_post, port_range

pytestmark = pytest.mark.e2e

EXAMPLES = 20
# Not checked: positive_data_acceptance. A spec can be schema-valid and still break a rule that
# relates fields (a colocated deployment with a decode group): those are 422s naming the field,
# by design (controller.spec.rules.check), and JSON Schema cannot say them.


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    tmp = tmp_path_factory.mktemp("schemathesis")
    port = free_port()
    proc = Process(
        ["serve", "--port", str(port), "--db", str(tmp / "pdctl.db")],
        port,
        env={"PDCTL_RUNTIME_DIR": str(tmp / "runs"), "PDCTL_PORT_RANGE": port_range()},
        log_path=tmp / "serve.log",
    )
    try:
        proc.wait_healthy(30)
        yield proc
    finally:
        _stop_everything(proc)
        proc.stop()


def _stop_everything(proc: Process) -> None:
    """A generated start may have launched instances (in their own sessions): stop them."""
    with contextlib.suppress(OSError, ValueError):
        status, raw = http_get(proc.url + "/api/deployments", timeout=10)
        for d in json.loads(raw) if status == 200 else []:
            http_post(f"{proc.url}/api/deployments/{d['name']}/stop", {}, timeout=60)


@pytest.fixture(scope="module")
def api_schema(serve: Process):
    return schemathesis.openapi.from_url(serve.url + "/openapi.json")


def test_no_5xx_and_answers_match_the_schema(api_schema) -> None:
    # One hypothesis run per operation, failures gathered: schemathesis' lazy
    # `from_fixture` parametrization does not run on pytest 9 (it rewrites node._nodeid).
    failures: dict[str, str] = {}
    for result in api_schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            database=None,
            deadline=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def run(case) -> None:
            # a fresh connection per call: a pooled one can meet uvicorn's keep-alive close
            # (5 s idle) on its way out, which fails the call once and passes on the replay
            case.call_and_validate(
                headers={"Connection": "close"},
                timeout=120,
                excluded_checks=[positive_data_acceptance],
            )

        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # gathered and reported below
            inner = getattr(exc, "exceptions", ())  # a flaky failure carries what failed first
            said = [str(exc), *(f"{type(e).__name__}: {e}" for e in inner)]
            failures[operation.label] = "\n".join(said)[:4000]
    assert not failures, "\n\n".join(f"{k}:\n{v}" for k, v in failures.items())
