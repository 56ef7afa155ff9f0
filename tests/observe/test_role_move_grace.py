"""The false alarm after a role move, reproduced and gone: an instance that served prefill
(computing every prompt) and moved back to decode carries that computing in its 10 s window
for 10 s; judged then, it read as "recomputes its prompts: PD is not happening" and cleared
8 s later. The PD check now gives every rollout (a role move too) the grace a switch gets.

A real /metrics server on loopback, the real Observer, a fake clock and a fake rollout log."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import aiohttp
from aiohttp import web

from controller.spec.deployment import DeploymentSpec
from observe.scrape.observer import Observer
from observe.scrape.settings import ObserveSettings
from state.hub import Hub
from tests.observe.metrics_endpoint import serve_metrics
from tests.specs import nixl_1p1d

MOVED_AT = 20.0  # the move back to decode ended here


def counters(t: float) -> dict[str, float]:
    """decode-1's counters at `t`: a prefill computing 2,000 tokens/s until MOVED_AT, then a
    healthy decode (KV by transfer, one token computed per 200-token prompt, 10 req/s)."""
    before, after = min(t, MOVED_AT), max(0.0, t - MOVED_AT)
    return {
        "external": 1990.0 * after,
        "local": 2000.0 * before + 10.0 * after,
        "first_tokens": 10.0 * after,
    }


def text(c: dict[str, float]) -> str:
    return (
        "# TYPE vllm:prompt_tokens_by_source_total counter\n"
        f'vllm:prompt_tokens_by_source_total{{source="external_kv_transfer"}} {c["external"]}\n'
        f'vllm:prompt_tokens_by_source_total{{source="local_compute"}} {c["local"]}\n'
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {c["first_tokens"]}\n'
        f"vllm:time_to_first_token_seconds_count {c['first_tokens']}\n"
        f"vllm:time_to_first_token_seconds_sum {c['first_tokens'] * 0.1}\n"
    )


def role_move(ended_at: float) -> SimpleNamespace:
    return SimpleNamespace(
        id="3",
        kind="role_move",
        strategy="in-place",
        state="done",
        started_at=ended_at - 4.0,
        ended_at=ended_at,
    )


async def events_over(rollouts: list, until: float) -> list[tuple[float, str]]:
    """Tick the observer once a (fake) second; the PD events it made, with when."""
    clock = {"t": 0.0}

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=text(counters(clock["t"])))

    runner, url = await serve_metrics(metrics)

    def status(_: str) -> list[dict]:
        role = "prefill" if clock["t"] < MOVED_AT else "decode"
        return [{"name": "decode-1", "role": role, "state": "RUNNING", "url": url}]

    dep = SimpleNamespace(spec=DeploymentSpec.model_validate(nixl_1p1d()))
    controller = SimpleNamespace(
        supervisor=SimpleNamespace(deployments={"pd": dep}),
        status=status,
        rollouts=SimpleNamespace(
            history=lambda name, limit: [r for r in rollouts if r.ended_at <= clock["t"]]
        ),
    )
    observer = Observer(controller, SimpleNamespace(engine=None), Hub(), ObserveSettings())
    observer._session = aiohttp.ClientSession()
    seen: list[tuple[float, str]] = []
    try:
        while clock["t"] <= until:
            await observer._observe("pd", clock["t"])
            seen += [(clock["t"], t.kind) for _, t in observer._pd_events]
            observer._pd_events = []
            clock["t"] += 1.0
    finally:
        await observer.close()
        await runner.cleanup()
    return seen


def test_without_the_grace_the_moved_back_decode_reads_as_recomputing_for_a_window():
    """The false alarm as reported: fired a second after the move, cleared ~8 s later."""
    seen = asyncio.run(events_over([], until=40.0))
    assert [kind for _, kind in seen] == ["pd.recomputing", "pd.recovered"]
    (fired, _), (cleared, _) = seen
    assert MOVED_AT < fired <= MOVED_AT + 3 and cleared - fired <= 10


def test_after_a_role_move_the_check_waits_its_window_and_no_alarm_fires():
    assert asyncio.run(events_over([role_move(MOVED_AT)], until=40.0)) == []
