"""The proxy with a render tier (connector/dispatch/render_tier.py): completions are rendered to
token ids
by the real stand-in render app and both legs generate on them; without one nothing changes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import generate_latest

from connector.dispatch.render_tier import tokens_body
from connector.settings import FlagInstance
from domain.workload import tokenizer
from harness.processes import metric_value
from simulator.server.render import RenderSettings, create_render_app
from tests.connector.fakes import (
    FakeEngine,
    completion,
    engines,
    run,
    running,
    settings_for,
    sse_events,
)
from tests.connector.test_proxy import post


@contextlib.asynccontextmanager
async def render_tier() -> AsyncIterator[str]:
    runner = web.AppRunner(create_render_app(RenderSettings("tiny", "tiny", 4096)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def test_tokens_body_replaces_the_prompt_only() -> None:
    body = {"model": "tiny", "prompt": "a b", "max_tokens": 3}
    assert tokens_body(body, [{"token_ids": [4, 5]}]) == {**body, "prompt": [4, 5]}
    assert tokens_body(body, {"token_ids": [4]}) == {**body, "prompt": [4]}
    for bad in ([], [{"token_ids": []}], {"token_ids": ["a"]}, "x", [{}, {}]):
        assert tokens_body(body, bad) is None


def test_both_legs_generate_on_the_rendered_token_ids() -> None:
    async def body() -> None:
        async with (
            render_tier() as render,
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], render=(FlagInstance(render),))) as (base, proxy),
        ):
            status, _, raw = await post(base, completion(4))
        assert status == 200
        ids = tokenizer.encode("hello there")
        assert p.seen[0].body["prompt"] == ids and d.seen[0].body["prompt"] == ids
        assert len([e for e in sse_events(raw) if isinstance(e, dict) and e.get("choices")]) == 4
        assert proxy.render.rendered == 1 and proxy.render.render_seconds > 0
        text = generate_latest(proxy.registry).decode()
        assert metric_value(text, "pdctl_proxy_rendered_requests_total") == 1
        assert metric_value(text, "pdctl_proxy_render_seconds_total") > 0
        assert metric_value(text, "pdctl_proxy_render_instances") == 1

    run(body())


def test_without_a_render_tier_nothing_changes() -> None:
    async def body() -> None:
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, _),
        ):
            assert (await post(base, completion(2)))[0] == 200
        assert d.seen[0].body["prompt"] == "hello there"

    run(body())


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


def test_a_chat_is_rendered_served_on_completion_legs_and_answered_as_a_chat() -> None:
    async def body() -> tuple:
        async with (
            render_tier() as render,
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], render=(FlagInstance(render),))) as (base, _),
        ):
            streamed = await post(base, {**CHAT, "stream": True}, path="/v1/chat/completions")
            whole = await post(base, CHAT, path="/v1/chat/completions")
        return p, d, streamed, whole

    p, d, streamed, whole = run(body())
    # the stand-in's chat template: a token for each role, then the content's tokens
    ids = tokenizer.encode("user")[:1] + tokenizer.encode("hi") + tokenizer.encode("assistant")[:1]
    assert p.seen[0].body["prompt"] == ids and "messages" not in d.seen[0].body
    assert d.seen[0].body["max_tokens"] == 3
    assert p.seen[0].path == "/v1/completions" and d.seen[0].path == "/v1/completions"
    events = [e for e in sse_events(streamed[2]) if isinstance(e, dict)]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert all("text" not in c and "content" in c["delta"] for e in events for c in e["choices"])
    answer = json.loads(whole[2])
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_a_render_tier_added_over_admin_is_used_and_listed_and_removed() -> None:
    async def body() -> None:
        async with (
            render_tier() as render,
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d])) as (base, proxy),
            aiohttp.ClientSession() as s,
        ):
            async with s.post(
                base + "/admin/instances", json={"url": render, "role": "render"}
            ) as r:
                assert r.status == 201
            async with s.get(base + "/admin/instances") as r:
                assert (await r.json())["render"] == [{"url": render, "role": "render"}]
            assert (await post(base, completion(2)))[0] == 200
            async with s.post(base + "/admin/instances/remove", json={"url": render}) as r:
                assert r.status == 200
            assert (await post(base, completion(2)))[0] == 200
        assert d.seen[0].body["prompt"] == tokenizer.encode("hello there")
        assert d.seen[1].body["prompt"] == "hello there"
        assert proxy.render.urls == []

    run(body())


def test_an_unreachable_render_instance_is_skipped_and_a_refusal_is_the_clients() -> None:
    dead = FlagInstance("http://127.0.0.1:9")

    async def body() -> tuple:
        async with (
            render_tier() as render,
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], render=(FlagInstance(render), dead))) as (base, proxy),
            running(settings_for([p], [d], render=(dead,))) as (lone, _),
        ):
            first = await post(base, completion(2))  # the dead one is picked first
            refused = await post(base, {**completion(2), "model": "other"})
            nowhere = await post(lone, completion(2))
            text = generate_latest(proxy.registry).decode()
        return p, d, first, refused, nowhere, text

    p, d, first, refused, nowhere, text = run(body())
    assert first[0] == 200 and d.seen[0].body["prompt"] == tokenizer.encode("hello there")
    assert metric_value(text, "pdctl_proxy_render_unreachable_total") == 2  # one per request
    assert refused[0] == 404 and b"other" in refused[2]
    assert nowhere[0] == 502
    error = json.loads(nowhere[2])["error"]
    assert error["leg"] == "render" and error["instance"] == "http://127.0.0.1:9"
    assert len(p.seen) == len(d.seen) == 1
