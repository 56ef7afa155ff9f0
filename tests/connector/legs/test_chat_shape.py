"""A completion answer put back in the chat shape (connector/legs/chat_shape.py), whole and streamed
in pieces cut anywhere; what is not a JSON event passes unchanged."""

from __future__ import annotations

import json

from connector.legs.chat_shape import ChatShape, legs_body, whole


def sse(*events: dict | str) -> bytes:
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )


HEAD = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "tiny"}
TOKENS = [
    {**HEAD, "choices": [{"index": 0, "text": "ba", "finish_reason": None}]},
    {**HEAD, "choices": [{"index": 0, "text": " be", "finish_reason": "length"}]},
    {**HEAD, "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}},
    "[DONE]",
]


def events(raw: bytes) -> list:
    out = []
    for block in raw.split(b"\n\n"):
        if block:
            payload = block[6:]
            out.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return out


def test_the_legs_body_takes_the_ids_and_the_chat_limit() -> None:
    chat = {"model": "m", "messages": [], "max_completion_tokens": 4, "stream": True}
    assert legs_body(chat, [1, 2]) == {
        "model": "m",
        "stream": True,
        "max_tokens": 4,
        "prompt": [1, 2],
    }


def test_a_stream_cut_anywhere_becomes_chat_chunks_with_the_role_first() -> None:
    raw = sse(*TOKENS)
    for cut in (1, 7, 40, len(raw) - 3):
        shape = ChatShape()
        out = events(shape.chunk(raw[:cut]) + shape.chunk(raw[cut:]))
        assert out[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert [e["choices"][0]["delta"]["content"] for e in out[1:3]] == ["ba", " be"]
        assert out[2]["choices"][0]["finish_reason"] == "length"
        assert out[3]["usage"] == {"prompt_tokens": 2, "completion_tokens": 2}
        assert all(e["id"] == "chatcmpl-1" for e in out[:4])
        assert {e["object"] for e in out[:4]} == {"chat.completion.chunk"} and out[4] == "[DONE]"


def test_garbage_and_errors_pass_unchanged_and_a_reset_sends_the_role_again() -> None:
    shape = ChatShape()
    assert shape.chunk(b"data: not json\n\n") == b"data: not json\n\n"
    error = sse({"error": {"message": "x"}})
    assert shape.chunk(error) == error
    shape.chunk(sse(TOKENS[0]))
    shape.reset()
    assert b'"role":"assistant"' in shape.chunk(sse(TOKENS[0]))


def test_a_whole_answer_becomes_a_chat_completion() -> None:
    body = {
        **HEAD,
        "choices": [
            {"index": 0, "text": "ba be", "finish_reason": "length", "prompt_token_ids": None}
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4},
    }
    out = json.loads(whole(json.dumps(body).encode()))
    assert out["object"] == "chat.completion" and out["id"] == "chatcmpl-1"
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant" and message["content"] == "ba be"
    assert "text" not in out["choices"][0] and out["usage"] == body["usage"]
    assert whole(b"not json") == b"not json"
