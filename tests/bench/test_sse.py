"""Interpreting SSE lines as token events, usage and errors."""

from __future__ import annotations

import json

import pytest

from bench.sse import MAX_LINE_BYTES, NOTHING, LineSplitter, error_message, parse_line


def _data(message: object) -> str:
    return f"data: {json.dumps(message)}\n"


def test_completion_text_is_a_token() -> None:
    assert parse_line(_data({"choices": [{"text": " ba"}]})).token


def test_chat_delta_content_is_a_token_but_role_only_delta_is_not() -> None:
    assert parse_line(_data({"choices": [{"delta": {"content": "ba"}}]})).token
    role_only = {"choices": [{"delta": {"role": "assistant", "content": ""}}]}
    assert not parse_line(_data(role_only)).token
    assert parse_line(_data({"choices": [{"delta": {"reasoning_content": "hm"}}]})).token


def test_completion_chunk_with_empty_text_is_a_token_as_vllm_counts_it() -> None:
    # vLLM streams "" for a token that ends inside a UTF-8 character, and for EOS: one step each
    assert parse_line(_data({"choices": [{"text": "", "finish_reason": None}]})).token
    assert parse_line(_data({"choices": [{"text": "", "finish_reason": "stop"}]})).token
    assert not parse_line(_data({"choices": [], "usage": {"completion_tokens": 3}})).token


def test_lines_split_across_chunks_come_out_whole_and_in_order() -> None:
    lines = LineSplitter()
    assert lines.feed(b'data: {"choices": [{"te') == []
    assert lines.feed(b'xt": "a"}]}\n\ndata: [DO') == [b'data: {"choices": [{"text": "a"}]}', b""]
    assert lines.feed(b"NE]") == []
    assert parse_line(lines.rest()).done
    assert parse_line(b'data: {"choices": [{"text": "b"}]}').token


def test_an_endless_line_is_an_error_not_a_memory_leak() -> None:
    lines = LineSplitter()
    with pytest.raises(ValueError, match="SSE line"):
        lines.feed(b"x" * (MAX_LINE_BYTES + 1))


def test_usage_chunk_gives_token_counts() -> None:
    event = parse_line(
        _data({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    )
    assert not event.token
    assert (event.prompt_tokens, event.completion_tokens) == (7, 3)


def test_done_and_noise() -> None:
    assert parse_line("data: [DONE]").done
    for line in ("", ": keep-alive", "event: ping", "id: 3"):
        event = parse_line(line)
        assert not (event.token or event.done or event.error)


def test_error_event_and_malformed_data_are_errors() -> None:
    assert parse_line(_data({"error": {"message": "boom", "code": 500}})).error == "boom"
    assert "malformed" in (parse_line("data: {not json").error or "")
    assert "unexpected" in (parse_line("data: [1, 2]").error or "")


def test_error_message_shapes() -> None:
    assert error_message({"error": {"message": "x"}}) == "x"
    assert error_message({"detail": "bad field"}) == "bad field"
    assert error_message("plain") == "plain"


def test_the_ttft_parts_comment_a_pdctl_proxy_sends_after_done():
    from bench.sse import ttft_parts

    line = b': ttft_parts {"queue_ms": 0.1, "transfer_source": "engine"}'
    assert ttft_parts(line) == {"queue_ms": 0.1, "transfer_source": "engine"}
    assert parse_line(line) is NOTHING  # a comment: nothing for the measurement
    assert ttft_parts(b": ttft_parts [1]") is None
    assert ttft_parts(b": ttft_parts {broken") is None
    assert ttft_parts(b"data: [DONE]") is None
