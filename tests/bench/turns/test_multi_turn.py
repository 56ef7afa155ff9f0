"""The growing-context chat workload: its texts, its next messages, its per-turn figures, and
one run against a fake server whose answers the next turn must carry."""

from __future__ import annotations

import asyncio
import json
import math

from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.turns.multi_turn import (
    MultiTurnConfig,
    TurnRecord,
    next_messages,
    run_multi_turn,
    summarize,
    user_text,
)
from domain.workload.tokenizer import count_tokens

CONFIG = MultiTurnConfig(conversations=2, turns=3, first_len=40, user_len=5, output_len=4)


def test_user_texts_have_their_lengths_and_repeat_for_a_seed():
    assert count_tokens(user_text(CONFIG, 0, 0)) == 40
    assert count_tokens(user_text(CONFIG, 0, 1)) == 5
    assert user_text(CONFIG, 1, 1) == user_text(CONFIG, 1, 1) != user_text(CONFIG, 0, 1)


def test_next_messages_grow_by_the_answer_and_the_user_text():
    first = [{"role": "user", "content": "hi"}]
    second = next_messages(first, "yo", "more")
    assert second == [
        *first,
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "more"},
    ]
    assert first == [{"role": "user", "content": "hi"}]  # not changed in place


def test_summaries_are_per_turn_over_what_succeeded():
    records = [
        TurnRecord(0, 0, ok=True, ttft=0.1, prompt_tokens=10),
        TurnRecord(1, 0, ok=True, ttft=0.3, prompt_tokens=20),
        TurnRecord(0, 1, ok=False, error="HTTP 500"),
    ]
    first, second = summarize(records, 2)
    assert (first.ok, round(first.mean_ttft_ms), first.mean_prompt_tokens) == (2, 200, 15)
    assert second.ok == 0 and math.isnan(second.mean_ttft_ms)


def test_a_run_sends_each_turn_with_the_answers_it_got():
    seen: list[list[dict]] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body["messages"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        answer = f"answer{len(body['messages'])}"
        for event in (
            {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
            {"choices": [{"delta": {"content": answer}}]},
            {"choices": [{"delta": {"content": " end"}, "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
        ):
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        async with TestServer(app) as server:
            turns = []

            async def between(turn: int) -> dict[str, float]:
                turns.append(turn)
                return {"marker": float(turn)}

            records, summaries = await run_multi_turn(
                str(server.make_url("")), "m", CONFIG, between
            )
        return records, summaries, turns

    records, summaries, turns = asyncio.run(main())
    assert turns == [0, 1, 2]
    assert all(r.ok and r.prompt_tokens == 7 for r in records)
    assert [s.extra["marker"] for s in summaries] == [0.0, 1.0, 2.0]
    third = [m for m in seen if len(m) == 5]
    assert len(third) == 2
    assert third[0][1] == {"role": "assistant", "content": "answer1 end"}
    assert third[0][3] == {"role": "assistant", "content": "answer3 end"}


def test_a_refused_turn_is_a_failed_record():
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "no"}}, status=503)

    async def main():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", refuse)
        async with TestServer(app) as server:
            return await run_multi_turn(str(server.make_url("")), "m", CONFIG)

    records, summaries = asyncio.run(main())
    assert not any(r.ok for r in records)
    assert records[0].error.startswith("HTTP 503")
    assert all(s.ok == 0 for s in summaries)


def test_an_unreachable_server_is_a_failed_record():
    from harness.processes import free_port

    config = MultiTurnConfig(conversations=1, turns=1, first_len=3, timeout_s=5)
    records, _ = asyncio.run(run_multi_turn(f"http://127.0.0.1:{free_port()}", "m", config))
    assert not records[0].ok and "ClientConnectorError" in records[0].error
