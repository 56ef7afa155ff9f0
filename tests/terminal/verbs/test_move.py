"""`pdctl move`: what it sends, what it says, and a bad --role refused before anything is sent
(tests/e2e/rollout/test_role_move.py moves instances through the REST API it calls)."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from terminal import exits
from terminal.verbs import cli as verbs_cli
from terminal.verbs import move as move_verb

MOVED = {"revision": 4, "instance": "decode-1", "epoch": 1, "from": "decode", "to": "prefill"}


class FakeApi:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.timeout_s = 15.0  # terminal/client.py's, for a quick call

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        self.sent.append((path, body))
        return {**MOVED, "seconds": 0.25}


def run(monkeypatch, api: FakeApi, *args: str) -> Any:
    app = typer.Typer()
    verbs_cli.register(app)
    monkeypatch.setattr(move_verb, "client", lambda server: api)
    return CliRunner().invoke(app, list(args))


def test_move_posts_the_move_and_says_where_it_went(monkeypatch):
    api = FakeApi()
    out = run(monkeypatch, api, "move", "flip", "decode-1", "--role", "prefill", "--reason", "x")
    assert out.exit_code == 0, out.output
    assert api.sent == [
        (
            "/api/deployments/flip/role-moves",
            {"instance": "decode-1", "role": "prefill", "reason": "x", "drain_timeout_s": 300.0},
        )
    ]
    assert "flip/decode-1: decode -> prefill in 0.25 s (epoch 1, revision 4)" in out.output


def test_a_bad_role_is_a_usage_error_before_anything_is_sent(monkeypatch):
    api = FakeApi()
    out = run(monkeypatch, api, "move", "flip", "decode-1", "--role", "both", "--reason", "x")
    assert out.exit_code == exits.USAGE and api.sent == []
    assert "--role 'both'" in out.output


def test_the_cli_waits_as_long_as_the_drain_it_asks_for(monkeypatch):
    """The answer comes once the instance serves its new role: a 15 s HTTP timeout cut off
    every move whose drain took longer, while the move went on."""
    for args, drain in (((), 300.0), (("--drain-timeout", "900"), 900.0)):
        api = FakeApi()
        out = run(
            monkeypatch, api, "move", "f", "decode-1", "--role", "prefill", "--reason", "x", *args
        )
        assert out.exit_code == 0, out.output
        assert api.sent[0][1]["drain_timeout_s"] == drain
        assert api.timeout_s >= drain + 30, (drain, api.timeout_s)
