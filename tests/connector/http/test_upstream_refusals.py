"""An engine refusing the request as sent (400, 404, 413, 422) is the client's error: its status
and message reach the client, naming the leg; anything else from a leg stays a 502. Found by
schemathesis (tests/connector/test_schemathesis.py): an unknown model was a 502."""

from __future__ import annotations

import json

import aiohttp
import pytest

from connector.errors import UpstreamError, UpstreamRefused
from connector.legs.client_body import upstream_failure
from tests.connector.fakes import FakeEngine, completion, engines, run, running, settings_for


async def post(base: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, s.post(base + "/v1/completions", json=body) as r:
        return r.status, json.loads(await r.read())


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_a_refusal_by_the_prefill_is_passed_on_and_the_decode_never_called(status: int):
    async def body():
        async with (
            engines(FakeEngine("p", prefill_status=status), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
        ):
            code, answer = await post(base, completion(3))
            assert code == status
            error = answer["error"]
            assert error["code"] == status and error["message"] == "prefill exploded"
            assert (error["leg"], error["instance"]) == ("prefill", p.url)
            assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
            assert d.seen == []
            assert proxy.metrics.outcomes["invalid"] == 1 and proxy.metrics.outcomes["failed"] == 0
            assert proxy.pool.get(p.url).healthy  # the client's mistake, not the engine's

    run(body())


@pytest.mark.parametrize("stream", [True, False])
def test_a_refusal_by_the_decode_is_passed_on(stream: bool):
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d", decode_status=400)) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            code, answer = await post(base, completion(3, stream=stream))
            assert code == 400
            assert (
                answer["error"]["leg"] == "decode"
                and "decode exploded" in answer["error"]["message"]
            )

    run(body())


@pytest.mark.parametrize("status", [401, 403, 429, 500, 503])
def test_other_statuses_from_a_leg_stay_502(status: int):
    async def body():
        async with (
            engines(FakeEngine("p", prefill_status=status), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            code, answer = await post(base, completion(3))
            assert code == 502
            assert answer["error"]["message"].startswith(
                f"prefill leg to {p.url} failed: HTTP {status}: "
            )

    run(body())


def test_the_engine_param_is_kept_and_odd_bodies_do_not_break_it():
    vllm = json.dumps(
        {
            "error": {
                "message": "max_tokens too big",
                "type": "BadRequestError",
                "param": "max_tokens",
                "code": 400,
            }
        }
    ).encode()
    refused = upstream_failure("decode", "http://d", 400, vllm)
    assert isinstance(refused, UpstreamRefused) and refused.body()["error"]["param"] == "max_tokens"
    for raw in (b"", b"not json", b"[1]", b'{"error": {"param": 7}}', b"[" * 10_000):
        refused = upstream_failure("prefill", "http://p", 422, raw)
        assert refused.status == 422 and refused.body()["error"].get("param") is None
    assert isinstance(upstream_failure("prefill", "http://p", 500, vllm), UpstreamError)
