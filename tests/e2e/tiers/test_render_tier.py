"""A render tier on loopback, real processes: NIXL stand-ins (prefill, decode), `pdctl sim
--render`, and two proxies over the same engines, one with the render tier (--render) and one
without. The same request gives the same completion text through both, whole and streamed;
only the render tier's proxy had it rendered. Chat too: rendered with the chat template, served
on completion legs, answered in the chat shape."""

from __future__ import annotations

import openai
import pytest

from harness.processes import http_get, metric_value, running, sim
from harness.stack import nixl_sim, proxy

pytestmark = [pytest.mark.e2e, pytest.mark.tiers]

RENDERED = {"handler": "/v1/completions/render", "status": "2xx"}


@pytest.fixture(scope="module")
def fronts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("render")
    prefill = nixl_sim(tmp, "prefill", "kv_producer")
    decode = nixl_sim(tmp, "decode", "kv_consumer")
    render = sim(tmp, "render", "tiny", "--render")
    with running(prefill, decode, render):
        legs = ["--connector", "nixl", "--mode", "read", "--prefill", prefill.url]
        legs += ["--decode", decode.url]
        plain = proxy(tmp, "plain", *legs)
        rendered = proxy(tmp, "rendered", *legs, "--render", render.url)
        with running(plain, rendered):
            yield plain, rendered, render


def client(front) -> openai.OpenAI:
    return openai.OpenAI(base_url=front.url + "/v1", api_key="none", max_retries=0)


def rendered_count(render) -> float:
    return metric_value(
        http_get(render.url + "/metrics")[1].decode(), "http_requests_total", **RENDERED
    )


def test_the_same_completion_with_and_without_the_render_tier(fronts) -> None:
    plain, rendered, render = fronts
    before = rendered_count(render)
    ask = {"model": "tiny", "prompt": "the render tier turns text into ids", "max_tokens": 12}
    texts = [client(f).completions.create(**ask).choices[0].text for f in (plain, rendered)]
    assert texts[0] == texts[1] and len(texts[0].split()) == 12
    assert rendered_count(render) - before == 1  # only the render tier's proxy asked it


def test_the_same_streamed_completion_and_usage(fronts) -> None:
    plain, rendered, render = fronts
    before = rendered_count(render)
    ask = {
        "model": "tiny",
        "prompt": "stream these tokens one by one",
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    outs = []
    for front in (plain, rendered):
        chunks = list(client(front).completions.create(**ask))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        outs.append((text, chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens))
    assert outs[0] == outs[1] and outs[0][2] == 16
    assert rendered_count(render) - before == 1


def test_the_render_tiers_proxy_measures_ttft_from_arrival(fronts) -> None:
    _, rendered, _ = fronts
    before = rendered.metrics()
    ask = {"model": "tiny", "prompt": "measured from arrival", "max_tokens": 4}
    for _ in range(2):
        client(rendered).completions.create(**ask)
    text = rendered.metrics()
    for family, labels in (
        ("pdctl_proxy_requests_total", {"outcome": "ok"}),
        ("pdctl_proxy_ttft_seconds_count", {}),
    ):
        grew = metric_value(text, family, **labels) - metric_value(before, family, **labels)
        assert grew == 2, (family, grew)


def test_the_same_chat_answer_with_and_without_the_render_tier(fronts) -> None:
    plain, rendered, render = fronts
    chat = {"handler": "/v1/chat/completions/render", "status": "2xx"}

    def chats() -> float:
        text = http_get(render.url + "/metrics")[1].decode()
        return metric_value(text, "http_requests_total", **chat)

    before = chats()
    ask = {"model": "tiny", "messages": [{"role": "user", "content": "hi there"}]}
    ask["max_completion_tokens"] = 9
    whole = [client(f).chat.completions.create(**ask) for f in (plain, rendered)]
    assert whole[0].choices[0].message.content == whole[1].choices[0].message.content
    assert whole[1].choices[0].message.role == "assistant" and whole[1].object == "chat.completion"
    assert whole[0].usage.prompt_tokens == whole[1].usage.prompt_tokens
    streamed, counts = [], []
    for front in (plain, rendered):
        chunks = list(
            client(front).chat.completions.create(
                **ask, stream=True, stream_options={"include_usage": True}
            )
        )
        streamed.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        assert chunks[0].choices[0].delta.role == "assistant"
        counts.append((len(chunks), chunks[-1].usage.completion_tokens))
    assert streamed[0] == streamed[1] == whole[0].choices[0].message.content
    assert counts[0] == counts[1]  # the same events: the proxy counts the same token events
    assert chats() - before == 2
