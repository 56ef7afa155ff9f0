"""The render tier's pure shapes (simulator/protocol/render_format.py): vLLM's GenerateRequest out
of an
OpenAI request, and the OpenAI answer out of token ids, whole and chunk by chunk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from domain.workload import tokenizer
from simulator.protocol import render_format
from simulator.protocol import request as openai_request
from simulator.protocol.request import RequestError


def parsed(kind: str, body: dict) -> tuple[openai_request.GenerationRequest, dict]:
    raw = json.dumps(body).encode()
    return openai_request.parse(kind, raw, "application/json", "tiny", 2048), body


def test_a_completion_renders_to_the_engines_token_ids() -> None:
    req, body = parsed("completion", {"model": "tiny", "prompt": "one two three", "max_tokens": 5})
    out = render_format.generate_request(req, body)
    assert out["token_ids"] == tokenizer.encode("one two three")
    assert out["sampling_params"]["max_tokens"] == 5
    assert out["request_id"].startswith("cmpl-") and out["model"] == "tiny"
    assert out["stream"] is False and out["stream_options"] is None


def test_a_chat_renders_with_the_engines_chat_template() -> None:
    messages = [{"role": "user", "content": "hello there"}]
    req, body = parsed("chat", {"model": "tiny", "messages": messages, "stream": True})
    out = render_format.generate_request(req, body)
    # The stand-in's template: one token a role, then the content's.
    role, assistant = tokenizer.encode("user")[:1], tokenizer.encode("assistant")[:1]
    assert out["token_ids"] == role + tokenizer.encode("hello there") + assistant
    assert out["stream"] is True and out["request_id"].startswith("chatcmpl-")


def generate_response(ids: list[int], finish: str | None = "length") -> dict:
    return {
        "request_id": "cmpl-x",
        "choices": [{"index": 0, "token_ids": ids, "finish_reason": finish}],
    }


def test_derender_gives_the_engines_text_and_usage() -> None:
    ids = tokenizer.output_token_ids([1, 2, 3], 0, 4)
    body = {"generate_responses": [generate_response(ids)], "prompt_tokens": [3]}
    out = render_format.derender("completion", body, "tiny")
    assert out["object"] == "text_completion"
    assert out["choices"][0]["text"] == tokenizer.decode(ids)
    assert out["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 7,
        "completion_tokens": 4,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def test_chat_derender_is_an_assistant_message() -> None:
    out = render_format.derender("chat", {"generate_response": generate_response([5, 6])}, "tiny")
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["content"] == tokenizer.decode([5, 6])
    assert out["usage"]["prompt_tokens"] == 0


def test_streamed_chunks_join_to_the_whole_text() -> None:
    ids = [7, 8, 9]
    state, texts = None, []
    for i, t in enumerate(ids):
        finish = "length" if i == len(ids) - 1 else None
        body = {"generate_chunk": generate_response([t], finish), "stream_state": state}
        out = render_format.derender_chunk("completion", body, "tiny")
        state = out["stream_state"]
        texts.append(out["chunk"]["choices"][0]["text"])
        assert out["chunk"]["choices"][0]["finish_reason"] == finish
    assert "".join(texts) == tokenizer.decode(ids)


def test_the_first_chat_chunk_carries_the_role() -> None:
    first = render_format.derender_chunk(
        "chat", {"generate_chunk": generate_response([1], None)}, "tiny"
    )
    assert first["chunk"]["choices"][0]["delta"] == {
        "role": "assistant",
        "content": tokenizer.decode([1]),
        "reasoning": None,
    }
    later = render_format.derender_chunk(
        "chat",
        {"generate_chunk": generate_response([2], None), "stream_state": first["stream_state"]},
        "tiny",
    )
    assert later["chunk"]["choices"][0]["delta"] == {
        "content": " " + tokenizer.decode([2]),
        "reasoning": None,
    }


BAD = {
    "no responses": ({"generate_responses": []}, "completion", "generate_responses"),
    "counts mismatch": (
        {"generate_responses": [generate_response([1])], "prompt_tokens": [1, 2]},
        "completion",
        "prompt_tokens",
    ),
    "negative id": (
        {"generate_response": generate_response([-1])},
        "chat",
        "generate_response.choices.0.token_ids",
    ),
    "empty chat ids": (
        {"generate_response": generate_response([])},
        "chat",
        "generate_response.choices.0.token_ids",
    ),
    "no choices": ({"generate_response": {"request_id": "x"}}, "chat", "generate_response"),
}


@pytest.mark.parametrize(("body", "kind", "param"), BAD.values(), ids=BAD.keys())
def test_a_bad_derender_body_is_a_400_naming_the_field(body: dict, kind: str, param: str) -> None:
    with pytest.raises(RequestError) as err:
        render_format.derender(kind, body, "tiny")
    assert err.value.status == 400 and err.value.param == param


FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm" / "render_tier"


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def keys(obj: Any) -> Any:
    """The shape of a JSON value: dict keys (recursively), the first item's shape of a list."""
    if isinstance(obj, dict):
        return {k: keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [keys(obj[0])] if obj and isinstance(obj[0], dict | list) else []
    return None


def test_render_has_vllm_0_32s_keys() -> None:
    req, body = parsed("completion", {"model": "tiny", "prompt": "hello there", "max_tokens": 5})
    [real] = recorded("completions_render.json")
    assert keys(render_format.generate_request(req, body)) == keys(real)
    messages = [{"role": "user", "content": "hi"}]
    req, body = parsed("chat", {"model": "tiny", "messages": messages, "stream": True})
    made = render_format.generate_request(req, body)
    real = recorded("chat_render.json")
    assert set(made) == set(real) and made["stream_options"] is real["stream_options"] is None
    assert set(made["sampling_params"]) == set(real["sampling_params"])
    assert made["sampling_params"]["output_kind"] == real["sampling_params"]["output_kind"]


@pytest.mark.parametrize(
    ("kind", "name", "body"),
    [
        (
            "completion",
            "completions_derender.json",
            {"generate_responses": [generate_response([1])]},
        ),
        ("chat", "chat_derender.json", {"generate_response": generate_response([1])}),
    ],
)
def test_derender_has_vllm_0_32s_keys(kind: str, name: str, body: dict) -> None:
    assert keys(render_format.derender(kind, body, "tiny")) == keys(recorded(name))


@pytest.mark.parametrize(
    ("kind", "name"),
    [("completion", "completions_derender_chunk.json"), ("chat", "chat_derender_chunk.json")],
)
def test_a_derendered_chunk_has_vllm_0_32s_keys(kind: str, name: str) -> None:
    out = render_format.derender_chunk(
        kind, {"generate_chunk": generate_response([1], None)}, "tiny"
    )
    real = recorded(name)
    assert keys(out) == keys(real)
    assert out["stream_state"]["role_sent"] is real["stream_state"]["role_sent"]
