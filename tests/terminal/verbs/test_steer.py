"""`pdctl pause|release|drain|undrain` and `pdctl move --force`: what they send, what they
say, a bad --group refused before anything is sent, and a refusal told with its reason
(tests/e2e/attach/test_steer.py runs them against a real control plane)."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from terminal import exits
from terminal.client import ApiError
from terminal.verbs import cli as verbs_cli
from terminal.verbs import move as move_verb
from terminal.verbs import steer as steer_verb

PROXY = "http://127.0.0.1:18000"


class FakeApi:
    def __init__(self, answer: Any = None, refusal: ApiError | None = None) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.answer, self.refusal = answer, refusal
        self.timeout_s = 15.0

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        self.sent.append((path, body))
        if self.refusal is not None:
            raise self.refusal
        return self.answer


def run(monkeypatch, api: FakeApi, *args: str) -> Any:
    app = typer.Typer()
    verbs_cli.register(app)
    monkeypatch.setattr(steer_verb, "client", lambda server: api)
    monkeypatch.setattr(move_verb, "client", lambda server: api)
    return CliRunner().invoke(app, list(args))


def test_drain_posts_the_instance_and_says_where(monkeypatch):
    api = FakeApi({"verb": "drain", "instance": "decode-1", "listed": True, "proxy": PROXY})
    out = run(monkeypatch, api, "drain", "ext", "decode-1", "--reason", "on-call")
    assert out.exit_code == 0, out.output
    body = {"instance": "decode-1", "reason": "on-call"}
    assert api.sent == [("/api/deployments/ext/proxy/drain", body)]
    assert f"ext: drain decode-1 at {PROXY}" in out.output


def test_pause_holds_every_group_unless_one_is_named(monkeypatch):
    api = FakeApi({"verb": "pause", "groups": ["read", "write", "colocated"], "proxy": PROXY})
    out = run(monkeypatch, api, "pause", "ext")
    assert out.exit_code == 0, out.output
    assert api.sent == [("/api/deployments/ext/proxy/pause", {"reason": None})]
    assert "pause read, write, colocated" in out.output
    out = run(monkeypatch, api, "release", "ext", "--group", "read")
    assert api.sent[-1] == ("/api/deployments/ext/proxy/release", {"group": "read", "reason": None})


def test_a_bad_group_is_a_usage_error_naming_the_flag(monkeypatch):
    api = FakeApi()
    out = run(monkeypatch, api, "pause", "ext", "--group", "reed")
    assert out.exit_code == exits.USAGE and api.sent == []
    assert "--group 'reed'" in out.output and "did you mean 'read'" in out.output


def test_a_refusal_exits_with_the_control_planes_reason(monkeypatch):
    said = "deployment 'ext' is attached behind a vllm-router proxy"
    api = FakeApi(refusal=ApiError(said, exits.CONFLICT, 409))
    out = run(monkeypatch, api, "undrain", "ext", "decode-0")
    assert out.exit_code == exits.CONFLICT and said in out.output


def test_move_force_is_sent_and_its_warning_shown(monkeypatch):
    moved = {"revision": 3, "instance": "decode-1", "epoch": 1, "from": "decode", "to": "prefill"}
    api = FakeApi({**moved, "seconds": 0.5, "warning": "the vllm-router proxy was not drained"})
    out = run(
        monkeypatch, api, "move", "ext", "decode-1", "--role", "prefill", "--reason", "x", "--force"
    )
    assert out.exit_code == 0, out.output
    assert api.sent[0][1]["force"] is True
    assert "warning: the vllm-router proxy was not drained" in out.output
