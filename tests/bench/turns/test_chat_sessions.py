"""`pdctl bench --dataset chat-sessions` against a real SSE server on loopback: every turn
sends the answer the server gave the last, the table and JSON have a row per turn, and each bad
flag, a missing directory and an unreachable server are one line naming the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from domain.workload.tokenizer import count_tokens, output_token_ids, token_text
from tests.bench.sse_server import FakeEngine, serving_in_thread
from tests.bench.test_cli import _invoke

SESSIONS = ["--dataset", "chat-sessions", "--timeout", "10"]
SMALL = [*SESSIONS, "--num-prompts", "3", "--turns", "3", "--input-len", "40"]
SMALL += ["--user-len", "6", "--output-len", "5"]


def test_each_turn_carries_the_servers_own_answers_and_the_result_has_a_row_per_turn(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sessions.json"
    engine = FakeEngine()
    with serving_in_thread(engine) as url:
        result = _invoke("--base-url", url, *SMALL, "--result-json", str(out))
    assert result.exit_code == 0, result.output
    assert "chat sessions: 3 conversations" in result.stdout
    doc = json.loads(out.read_text())
    assert doc["dataset"] == "chat-sessions" and doc["model"] == "ok" and doc["failed"] == 0
    assert [(t["turn"], t["answered"], t["sent"]) for t in doc["turns"]] == [
        (1, 3, 3),
        (2, 3, 3),
        (3, 3, 3),
    ]
    tokens = [t["mean_prompt_tokens"] for t in doc["turns"]]
    assert tokens[0] < tokens[1] < tokens[2], tokens  # the context grows turn by turn
    assert all(t["mean_ttft_ms"] > 0 for t in doc["turns"])
    # turn 2 of each conversation repeats turn 1's messages, then the answer it was given
    assert len(engine.payloads) == 9 and all(p["stream"] for p in engine.payloads)
    # (a turn's requests go at once, so the server sees them in any order: pair by opening)
    firsts = {p["messages"][0]["content"]: p for p in engine.payloads[:3]}
    seconds = engine.payloads[3:6]
    assert len(firsts) == 3 and {s["messages"][0]["content"] for s in seconds} == set(firsts)
    for second in seconds:
        first = firsts[second["messages"][0]["content"]]
        assert second["messages"][0] == first["messages"][0] and len(second["messages"]) == 3
        assert second["messages"][1]["role"] == "assistant"
        assert second["messages"][1]["content"] == streamed(first)  # what it was answered


def streamed(payload: dict) -> str:
    """The text FakeEngine streams for `payload` (its tokens follow the prompt's length)."""
    prompt = sum(count_tokens(m["content"]) for m in payload["messages"])
    ids = output_token_ids([prompt], 0, payload["max_tokens"])
    return "".join(token_text(t, first=i == 0) for i, t in enumerate(ids))


def test_failed_turns_are_counted_and_said_not_fatal(tmp_path: Path) -> None:
    out = tmp_path / "sessions.json"
    with serving_in_thread(FakeEngine()) as url:
        result = _invoke(
            "--base-url", url, *SMALL, "--model", "http-500", "--result-json", str(out)
        )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["failed"] == 9 and doc["errors"][0].startswith("HTTP 500")
    assert all(t["answered"] == 0 and t["mean_ttft_ms"] is None for t in doc["turns"])
    assert "9 turn(s) failed: HTTP 500" in result.stderr


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--request-rate", "4"], "--request-rate"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--turns", "0"], "--turns"),
        (["--turns", "65"], "--turns"),
        (["--user-len", "0"], "--user-len"),
        (["--output-len", "0"], "--output-len"),
        (["--timeout", "0"], "--timeout"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(args: list[str], flag: str) -> None:
    result = _invoke("--base-url", "http://127.0.0.1:9", *SESSIONS, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {flag}"), result.stderr


def test_a_missing_directory_and_an_unreachable_server_name_their_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "r.json"
    result = _invoke("--base-url", "http://127.0.0.1:9", *SESSIONS, "--result-json", str(missing))
    assert result.exit_code == 2 and result.stderr.startswith("Error: --result-json: directory")
    result = _invoke("--base-url", "http://127.0.0.1:9", *SESSIONS, "--timeout", "2")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith("Error: --base-url: cannot reach http://127.0.0.1:9/v1/models")
