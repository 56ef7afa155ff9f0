"""The error paths of the operator verbs a real control plane cannot be made to take on cue:
a switch that fails or outlasts --timeout, instances that give up or do not come up in time,
the websocket closing on a follow; and the usage errors said before anything is sent (exit 2)."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner
from websockets.exceptions import ConnectionClosedError
from websockets.frames import Close

import bench.cli
from terminal import exits
from terminal.event_stream import closed_error, ws_url
from terminal.verbs import cli as verbs_cli
from terminal.verbs import follow as follow_verbs
from terminal.verbs import lifecycle as lifecycle_verbs
from terminal.verbs import switch as switch_verb

RUNNING = {
    "id": "r2", "deployment": "mori", "target": "write", "strategy": "hold", "state": "running",
    "steps": ["pause read", "restart prefill-0"], "current": "pause read", "started_at": 1.0,
    "ended_at": None, "revision": 2, "revision_state": "in_progress",
}  # fmt: skip
SPEC = {"groups": [{"role": "prefill"}, {"role": "decode"}]}


class FakeApi:
    """Answers by path, in turn: each path's list of answers, the last one repeated."""

    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers, self.sent = answers, []

    def get(self, path: str, **query: Any) -> Any:
        found = self.answers[path]
        return found.pop(0) if len(found) > 1 else found[0]

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        self.sent.append((path, body))
        return self.get(path)


def run(monkeypatch, api: FakeApi | None, *args: str) -> Any:
    app = typer.Typer()
    verbs_cli.register(app)
    bench.cli.register(app)
    for module in (switch_verb, lifecycle_verbs, follow_verbs):
        monkeypatch.setattr(module, "client", lambda server: api)
    return CliRunner().invoke(app, list(args))


def test_a_failed_switch_exits_1_naming_the_step_and_why(monkeypatch) -> None:
    failed = RUNNING | {
        "state": "failed", "current": "restart prefill-0", "ended_at": 4.0,
        "revision_state": "rolled_back", "failed_step": "restart prefill-0",
        "error": "restart prefill-0: not ready in 60 s",
    }  # fmt: skip
    api = FakeApi(
        {
            "/api/deployments/mori": [{"spec": SPEC}],
            "/api/deployments/mori/switch": [RUNNING],
            "/api/deployments/mori/switches/r2": [
                RUNNING | {"current": "restart prefill-0"},
                failed,
            ],
        }
    )
    out = run(monkeypatch, api, "switch", "mori", "--mode", "write", "--reason", "why")
    assert out.exit_code == exits.FAILED
    assert api.sent == [
        ("/api/deployments/mori/switch", {"mode": "write", "strategy": "hold", "reason": "why"})
    ]
    assert "  r2 step 2/2: restart prefill-0" in out.stderr
    assert out.stderr.splitlines()[-1] == (
        "pdctl switch: error: mori: switch r2 to write by hold failed in 3.0 s (revision 2 "
        "rolled back): failed at 'restart prefill-0': restart prefill-0: not ready in 60 s"
    )


def test_a_switch_that_outlasts_the_timeout_exits_1_and_says_it_goes_on(monkeypatch) -> None:
    api = FakeApi(
        {
            "/api/deployments/mori": [{"spec": SPEC}],
            "/api/deployments/mori/switch": [RUNNING],
            "/api/deployments/mori/switches/r2": [RUNNING],
        }
    )
    args = ("switch", "mori", "--mode", "write", "--reason", "x", "--timeout", "1")
    out = run(monkeypatch, api, *args)
    assert out.exit_code == exits.FAILED
    assert out.stderr.splitlines()[-1] == (
        "pdctl switch: error: switch r2 still running after --timeout 1 s at step 1/2: pause "
        "read (it goes on; pdctl events mori --follow)"
    )


def test_a_switch_without_waiting_prints_its_id(monkeypatch) -> None:
    api = FakeApi({"/api/deployments/mori/switch": [RUNNING]})
    args = ("switch", "mori", "--mode", "read", "--strategy", "roll", "--reason", "x")
    out = run(monkeypatch, api, *args, "--no-wait")
    assert (out.exit_code, out.stdout) == (0, "r2 running\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--mode", "both", "--reason", "x"), "--mode 'both': one of read, write"),
        (("--mode", "read", "--strategy", "fast", "--reason", "x"),
         "--strategy 'fast': one of hold, keep-serving, roll"),
    ],
)  # fmt: skip
def test_a_bad_mode_or_strategy_is_refused_before_anything_is_sent(monkeypatch, args, said):
    out = run(monkeypatch, None, "switch", "mori", *args)
    assert out.exit_code == exits.USAGE
    assert out.stderr.strip() == f"pdctl switch: error: {said}"


def test_a_start_whose_instance_gives_up_exits_1_naming_it(monkeypatch) -> None:
    starting = [{"name": "decode-0", "role": "decode", "state": "STARTING", "pid": 5}]
    fatal = [starting[0] | {"state": "FATAL", "failures": 3, "last_exit_code": 2}]
    api = FakeApi(
        {
            "/api/deployments/mori/start": [starting],
            "/api/deployments/mori/status": [starting, fatal],
        }
    )
    out = run(monkeypatch, api, "start", "mori")
    assert out.exit_code == exits.FAILED
    assert "  decode-0: STARTING -> FATAL" in out.stderr
    assert out.stderr.splitlines()[-1] == (
        "pdctl start: error: mori: decode-0 is FATAL (gave up after 3 failed start(s), last "
        "exit code 2) (pdctl logs mori INSTANCE)"
    )


def test_a_start_that_outlasts_the_timeout_exits_1(monkeypatch) -> None:
    starting = [{"name": "decode-0", "role": "decode", "state": "STARTING", "pid": 5}]
    api = FakeApi(
        {"/api/deployments/mori/start": [starting], "/api/deployments/mori/status": [starting]}
    )
    out = run(monkeypatch, api, "start", "mori", "--timeout", "1")
    assert out.exit_code == exits.FAILED
    assert out.stderr.strip() == (
        "pdctl start: error: mori: not done within --timeout 1 s: 1 processes: 1 STARTING "
        "(it goes on in the server; pdctl show mori)"
    )
    no_wait = run(monkeypatch, api, "start", "mori", "--no-wait")
    assert (no_wait.exit_code, no_wait.stdout) == (
        0,
        "mori: start asked: 1 processes: 1 STARTING\n",
    )


def test_following_a_log_prints_each_new_line_once_until_the_timeout(monkeypatch) -> None:
    tails = [{"lines": ["a", "b"]}, {"lines": ["a", "b", "c"]}, {"lines": ["c", "d"]}]
    api = FakeApi({"/api/deployments/mori/logs/decode-0": tails})
    out = run(monkeypatch, api, "logs", "mori", "decode-0", "-f", "--timeout", "2.5")
    assert (out.exit_code, out.stdout) == (0, "a\nb\nc\nd\n")
    api = FakeApi({"/api/deployments/mori/logs/decode-0": [{"lines": ["x"]}, {"lines": ["y"]}]})
    out = run(monkeypatch, api, "logs", "mori", "decode-0", "-f", "--timeout", "1.5", "--json")
    assert out.stdout.splitlines() == [
        '{"instance": "decode-0", "line": "x"}',
        '{"instance": "decode-0", "line": "y"}',
    ]
    assert "lines written faster than --lines between reads were skipped" in out.stderr


@pytest.mark.parametrize(
    ("code", "reason", "exit_code", "said"),
    [
        (4401, "a valid viewer or operator token is required", exits.NOT_ALLOWED,
         "a valid viewer or operator token is required (set PDCTL_TOKEN) (websocket close 4401)"),
        (4404, "no deployment named 'x'", exits.FAILED,
         "no deployment named 'x' (websocket close 4404)"),
        (1011, "", exits.UNREACHABLE, "the server closed the event stream (websocket close 1011)"),
    ],
)  # fmt: skip
def test_a_closed_event_stream_is_one_line_with_its_exit_code(code, reason, exit_code, said):
    err = closed_error(ConnectionClosedError(Close(code, reason), None))
    assert (err.code, err.message) == (exit_code, said)
    lost = closed_error(ConnectionClosedError(None, None))
    assert lost.code == exits.UNREACHABLE and "close 1006" in lost.message


def test_the_websocket_url_follows_the_server() -> None:
    assert ws_url("http://127.0.0.1:8000", "a b") == "ws://127.0.0.1:8000/ws/deployments/a%20b"
    assert ws_url("https://h/pd", "x") == "wss://h/pd/ws/deployments/x"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--base-url", "http://127.0.0.1:9", "--deployment", "mori"),
         "Error: --base-url and --deployment are exclusive: give one (--deployment loads its "
         "proxy)"),
        ((), "Error: give --base-url URL (a server to load) or --deployment NAME (a stored one)"),
        (("--base-url", "http://127.0.0.1:9", "--server", "http://127.0.0.1:8000"),
         "Error: --server goes with --deployment (the control plane that stores it)"),
        (("--deployment", "mori", "--server", "127.0.0.1:1"),
         "Error: --deployment mori: --server '127.0.0.1:1' is not an http:// or https:// URL"),
    ],
)  # fmt: skip
def test_bench_names_the_flags_it_refuses(monkeypatch, args, said) -> None:
    out = run(monkeypatch, None, "bench", *args)
    assert out.exit_code == exits.USAGE
    assert out.stderr.strip() == said
