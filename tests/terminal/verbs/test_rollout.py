"""`pdctl rollout status|abort|undo|history`, `apply` and `restart` as clients of the rollout
API, against answers given in turn (what a real control plane cannot be made to do on cue: a
step that fails, a rollback that fails, a rollout past --timeout); tests/terminal/
test_rollout_e2e.py runs them against a real `pdctl serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from terminal import exits
from terminal import rollout_views as views
from terminal.client import ApiError
from terminal.verbs import apply as apply_verb
from terminal.verbs import cli as verbs_cli
from terminal.verbs import lifecycle as lifecycle_verbs
from terminal.verbs import rollout as rollout_verbs

BASE = "/api/deployments/mori"


def step(name: str, state: str = "pending", seconds: float | None = None, **more: Any) -> dict:
    return {"step": name, "state": state, "deadline_s": 30.0, "seconds": seconds} | more


def rollout(rid: str = "4", **more: Any) -> dict[str, Any]:
    """A record as GET .../rollouts/{id} gives it: two steps, both pending."""
    return {
        "id": rid, "deployment": "mori", "kind": "apply", "strategy": "roll", "state": "running",
        "steps": ["apply prefill-0", "wait_ready prefill-0"], "current": None, "step_index": 0,
        "step_states": [step("apply prefill-0"), step("wait_ready prefill-0")],
        "started_at": 100.0, "ended_at": None, "revision": 3, "revision_state": "in_progress",
        "from_revision": 2, "auto_rollback": True, "rolled_back_by": None, "rollback_of": None,
        "error": None, "changes": {"keep": ["proxy"], "restart": ["prefill-0"], "start": [],
                                    "stop": []},
    } | more  # fmt: skip


AT_1 = rollout(
    current="apply prefill-0",
    step_states=[step("apply prefill-0", "running"), step("wait_ready prefill-0")],
)
AT_2 = rollout(
    current="wait_ready prefill-0", step_index=1,
    step_states=[step("apply prefill-0", "done", 0.4), step("wait_ready prefill-0", "running")],
)  # fmt: skip
DONE = rollout(
    state="done", ended_at=108.25, revision_state="applied", step_index=2,
    step_states=[step("apply prefill-0", "done", 0.4), step("wait_ready prefill-0", "done", 7.8)],
)  # fmt: skip
FAILED_STEPS = [
    step("apply prefill-0", "done", 0.4),
    step("wait_ready prefill-0", "failed", 30.0, error="deadline 30 s"),
]
FAILING = rollout(  # failed, its rollback not begun yet: ended_at stays empty until it ends
    state="failed", step_states=FAILED_STEPS, error="wait_ready prefill-0: deadline 30 s",
)  # fmt: skip
ROLLBACK = rollout(
    "5", kind="rollback", revision=2, revision_state="", rollback_of="4", auto_rollback=False,
    current="apply prefill-0", step_states=[step("apply prefill-0", "running")],
    steps=["apply prefill-0"],
)  # fmt: skip
ROLLED_BACK = ROLLBACK | {
    "state": "done", "ended_at": 112.0, "revision_state": "applied",
    "step_states": [step("apply prefill-0", "done", 3.5)],
}  # fmt: skip
FAILED = FAILING | {"rolled_back_by": "5", "ended_at": 112.0, "revision_state": "rolled_back"}
ABORTED = AT_2 | {"state": "aborted", "rolled_back_by": "5"}
RESTART = {"id": "7", "kind": "restart"}
TRUTH = [
    {"name": "proxy", "role": "proxy", "state": "RUNNING", "revision": 3,
     "desired_revision": 3, "drifted": False, "why": None},
    {"name": "prefill-0", "role": "prefill", "state": "RUNNING", "revision": 2,
     "desired_revision": 3, "drifted": True, "why": "command line: --max-num-seqs"},
]  # fmt: skip


def body(rec: dict | None, applied: bool = False, **more: Any) -> dict[str, Any]:
    """GET .../rollout: the rollout running (else the last) and each process's truth."""
    return {
        "deployment": "mori", "desired_revision": 3, "revision_state": "in_progress",
        "running": True, "applied": applied, "drifted": [] if applied else ["prefill-0"],
        "rollout": rec, "instances": TRUTH,
    } | more  # fmt: skip


class FakeApi:
    """Answers by path, in turn: each path's list of answers, the last one repeated; an
    ApiError in the list is raised."""

    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, Any, dict[str, Any]]] = []

    def get(self, path: str, **query: Any) -> Any:
        found = self.answers[path]
        answer = found.pop(0) if len(found) > 1 else found[0]
        if isinstance(answer, ApiError):
            raise answer
        return answer

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        self.sent.append((path, body, {k: v for k, v in query.items() if v is not None}))
        return self.get(path)

    def call(self, method: str, path: str, body: Any = None, **how: Any) -> Any:
        self.sent.append((f"{method} {path}", body, how.get("query") or {}))
        return type("Answer", (), {"body": self.get(f"{method} {path}")})


def run(monkeypatch, api: FakeApi | None, *args: str) -> Any:
    app = typer.Typer()
    verbs_cli.register(app)
    for module in (rollout_verbs, apply_verb, lifecycle_verbs):
        monkeypatch.setattr(module, "client", lambda server: api)
    return CliRunner().invoke(app, list(args))


def test_status_follows_each_step_until_done_and_exits_0(monkeypatch) -> None:
    api = FakeApi({f"{BASE}/rollout": [body(AT_1), body(AT_1), body(AT_2), body(DONE)]})
    out = run(monkeypatch, api, "rollout", "status", "mori")
    assert out.exit_code == 0, out.output
    assert out.stderr.splitlines() == [
        "mori: rollout 4 (apply by roll) toward revision 3: restart prefill-0; at step 1/2: "
        "apply prefill-0",
        "  rollout 4 step 1/2 apply prefill-0: running (deadline 30 s)",
        "  rollout 4 step 1/2 apply prefill-0: done in 0.4 s",
        "  rollout 4 step 2/2 wait_ready prefill-0: running (deadline 30 s)",
        "  rollout 4 step 2/2 wait_ready prefill-0: done in 7.8 s",
    ]
    assert out.stdout == ("mori: rollout 4 (apply by roll) done in 8.2 s (revision 3 applied)\n")


def test_a_failed_rollout_is_followed_through_its_rollback_and_exits_1(monkeypatch) -> None:
    api = FakeApi(
        {
            f"{BASE}/rollout": [body(AT_2), body(FAILING), body(ROLLBACK), body(ROLLED_BACK)],
            f"{BASE}/rollouts/4": [FAILING | {"rolled_back_by": "5"}, FAILED],
            f"{BASE}/rollouts/5": [ROLLED_BACK],
        }
    )
    out = run(monkeypatch, api, "rollout", "status", "mori")
    assert out.exit_code == exits.FAILED, out.output
    assert "  rollout 4 step 2/2 wait_ready prefill-0: failed in 30.0 s: deadline 30 s" in (
        out.stderr.splitlines()
    )
    assert "  rollout 5 step 1/1 apply prefill-0: running (deadline 30 s)" in out.stderr
    assert "  rollout 5 step 1/1 apply prefill-0: done in 3.5 s" in out.stderr
    assert out.stdout == ""
    assert out.stderr.splitlines()[-1] == (
        "pdctl rollout status: error: mori: rollout 4 (apply by roll) failed in 12.0 s "
        "(revision 3 rolled back): wait_ready prefill-0: deadline 30 s; rolled back by "
        "rollout 5: done"
    )


def test_status_past_the_timeout_exits_1_saying_where_it_is(monkeypatch) -> None:
    api = FakeApi({f"{BASE}/rollout": [body(AT_2)]})
    out = run(monkeypatch, api, "rollout", "status", "mori", "--timeout", "1")
    assert out.exit_code == exits.FAILED
    assert out.stderr.splitlines()[-1] == (
        "pdctl rollout status: error: rollout 4 still running after --timeout 1 s at step "
        "2/2: wait_ready prefill-0 (it goes on: `pdctl rollout status mori` follows it, "
        "`pdctl rollout abort mori` ends it)"
    )


def test_status_with_none_running_shows_the_truth_and_exits_by_applied(monkeypatch) -> None:
    drifted = run(
        monkeypatch, FakeApi({f"{BASE}/rollout": [body(FAILED)]}), "rollout", "status", "mori"
    )
    assert drifted.exit_code == exits.FAILED
    lines = drifted.stdout.splitlines()
    assert lines[0] == "mori: revision 3 in progress, not applied: 1 drifted: prefill-0"
    assert lines[1].startswith("last: mori: rollout 4 (apply by roll) failed in 12.0 s")
    assert lines[3].split() == ["NAME", "ROLE", "STATE", "REVISION", "DESIRED", "DRIFTED", "WHY"]
    assert lines[5].split() == [
        "prefill-0", "prefill", "RUNNING", "2", "3", "yes", "command", "line:", "--max-num-seqs"
    ]  # fmt: skip
    applied = body(DONE, applied=True, revision_state="applied")
    fine = run(monkeypatch, FakeApi({f"{BASE}/rollout": [applied]}), "rollout", "status", "mori")
    assert fine.exit_code == 0
    assert fine.stdout.splitlines()[0] == ("mori: revision 3 applied: every process runs it, ready")
    never = body(None, running=False)
    out = run(monkeypatch, FakeApi({f"{BASE}/rollout": [never]}), "rollout", "status", "mori")
    assert out.exit_code == exits.FAILED
    assert out.stdout.splitlines()[:2] == [
        "mori: not running (revision 3 desired; pdctl start mori)",
        "no rollout yet",
    ]


def test_status_once_and_json_do_not_follow(monkeypatch) -> None:
    api = FakeApi({f"{BASE}/rollout": [body(AT_2)]})
    once = run(monkeypatch, api, "rollout", "status", "mori", "--once")
    assert once.exit_code == exits.FAILED  # not applied while it runs
    assert once.stdout.splitlines()[1] == (
        "running: rollout 4 (apply by roll), step 2/2: wait_ready prefill-0"
    )
    as_json = run(monkeypatch, api, "rollout", "status", "mori", "--json")
    assert as_json.exit_code == exits.FAILED and '"desired_revision": 3' in as_json.stdout


def test_abort_follows_the_rollback_and_exits_0_when_it_is_done(monkeypatch) -> None:
    api = FakeApi(
        {
            f"{BASE}/rollout/abort": [AT_2],
            f"{BASE}/rollout": [body(ROLLBACK), body(ROLLED_BACK)],
            f"{BASE}/rollouts/4": [ABORTED, ABORTED | {"ended_at": 110.0}],
            f"{BASE}/rollouts/5": [ROLLED_BACK],
        }
    )
    out = run(monkeypatch, api, "rollout", "abort", "mori", "--reason", "too slow")
    assert out.exit_code == 0, out.output
    assert api.sent == [(f"{BASE}/rollout/abort", None, {"reason": "too slow"})]
    assert out.stderr.splitlines()[0] == (
        "mori: aborting rollout 4 (apply by roll) at step 2/2: wait_ready prefill-0; it rolls "
        "back to revision 2"
    )
    assert out.stdout.startswith("mori: rollout 4 (apply by roll) aborted in 10.0 s")
    assert out.stdout.rstrip().endswith("rolled back by rollout 5: done")


def test_abort_exits_1_when_the_rollback_fails_and_at_once_with_no_wait(monkeypatch) -> None:
    broken = ROLLED_BACK | {"state": "failed", "error": "apply prefill-0: port in use"}
    api = FakeApi(
        {
            f"{BASE}/rollout/abort": [AT_2],
            f"{BASE}/rollout": [body(broken)],
            f"{BASE}/rollouts/4": [ABORTED | {"ended_at": 110.0}],
            f"{BASE}/rollouts/5": [broken],
        }
    )
    out = run(monkeypatch, api, "rollout", "abort", "mori")
    assert out.exit_code == exits.FAILED
    assert out.stderr.splitlines()[-1].endswith(
        "rolled back by rollout 5: failed (apply prefill-0: port in use)"
    )
    api = FakeApi({f"{BASE}/rollout/abort": [AT_2]})
    quick = run(monkeypatch, api, "rollout", "abort", "mori", "--no-wait")
    assert (quick.exit_code, quick.stdout) == (
        0,
        "rollout 4 aborting; `pdctl rollout status mori` follows it\n",
    )


def test_a_refusal_is_the_servers_line_with_its_exit_code(monkeypatch) -> None:
    said = "409: no rollout of 'mori' is in progress: nothing to abort"
    api = FakeApi({f"{BASE}/rollout/abort": [ApiError(said, exits.CONFLICT, 409)]})
    out = run(monkeypatch, api, "rollout", "abort", "mori")
    assert (out.exit_code, out.stderr) == (exits.CONFLICT, f"pdctl rollout abort: error: {said}\n")


def test_undo_sends_what_was_asked_and_follows_the_rollout(monkeypatch) -> None:
    undone = rollout("6", kind="undo", revision=4, reason="undo to revision 2")
    api = FakeApi(
        {
            f"{BASE}/rollout/undo": [{"deployment": "mori", "revision": 4, "rollout": undone}],
            f"{BASE}/rollout": [body(DONE | {"id": "6", "kind": "undo", "revision": 4})],
        }
    )
    args = ("rollout", "undo", "mori", "--to-revision", "2", "--strategy", "hold")
    out = run(monkeypatch, api, *args, "--reason", "bad flag")
    assert out.exit_code == 0, out.output
    assert api.sent == [
        (
            f"{BASE}/rollout/undo",
            {"to_revision": 2, "strategy": "hold", "reason": "bad flag"},
            {},
        )
    ]
    assert out.stderr.splitlines()[0] == (
        "mori: rollout 6 (undo by roll) toward revision 4: restart prefill-0 (undo to revision 2)"
    )
    assert out.stdout == "mori: rollout 6 (undo by roll) done in 8.2 s (revision 4 applied)\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("rollout", "undo", "mori", "--strategy", "fast"),
         "pdctl rollout undo: error: --strategy 'fast': one of roll, hold, recreate"),
        (("restart", "mori", "--strategy", "keep-serving"),
         "pdctl restart: error: --strategy 'keep-serving': one of roll, hold, recreate"),
        (("apply", "-f", "x.yaml", "--strategy", "fast"),
         "pdctl apply: error: --strategy 'fast': one of roll, hold, recreate"),
        (("apply", "-f", "x.yaml", "--no-rollout", "--strategy", "hold"),
         "pdctl apply: error: --strategy goes with a rollout: drop --no-rollout, or --strategy"),
        (("apply", "-f", "x.yaml", "--no-rollout", "--wait"),
         "pdctl apply: error: --wait goes with a rollout: drop --no-rollout, or --wait"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_refused_before_anything_is_sent(monkeypatch, args, said) -> None:
    api = FakeApi({})
    out = run(monkeypatch, api, *args)
    assert (out.exit_code, out.stderr.strip(), api.sent) == (exits.USAGE, said, [])


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("rollout", "undo", "mori", "--to-revision", "0"), "--to-revision"),
        (("rollout", "history", "mori", "--limit", "0"), "--limit"),
        (("rollout", "status", "mori", "--timeout", "0"), "--timeout"),
    ],
)
def test_an_out_of_range_number_names_its_flag(monkeypatch, args, flag) -> None:
    out = run(monkeypatch, FakeApi({}), *args)
    assert out.exit_code == exits.USAGE and f"'{flag}'" in out.stderr


def test_history_lists_rollouts_newest_first(monkeypatch) -> None:
    api = FakeApi({f"{BASE}/rollouts": [[FAILED, DONE | {"id": "3", "revision": 2}]]})
    out = run(monkeypatch, api, "rollout", "history", "mori")
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[0].split() == [
        "ID", "STARTED", "KIND", "STRATEGY", "REVISION", "STATE", "TOOK", "ERROR"
    ]  # fmt: skip
    assert lines[1].split()[:1] + lines[1].split()[3:] == [
        "4", "apply", "roll", "3", "failed", "12.0s", "wait_ready", "prefill-0:", "deadline",
        "30", "s",
    ]  # fmt: skip
    assert lines[2].split()[-2:] == ["8.2s", "-"]
    empty = run(monkeypatch, FakeApi({f"{BASE}/rollouts": [[]]}), "rollout", "history", "mori")
    assert empty.stdout == "No rollouts of mori yet.\n"


def test_restart_follows_the_rollout_it_began(monkeypatch) -> None:
    restarting = rollout(**RESTART, revision_state="applied")
    api = FakeApi(
        {
            f"{BASE}/rollout": [body(DONE), body(restarting), body(DONE | RESTART)],
            f"{BASE}/restart": [[]],
        }
    )
    out = run(monkeypatch, api, "restart", "mori", "--strategy", "hold", "--reason", "x")
    assert out.exit_code == 0, out.output
    assert api.sent == [(f"{BASE}/restart", None, {"reason": "x", "strategy": "hold"})]
    assert out.stderr.splitlines()[0] == (
        "mori: rollout 7 (restart by roll) toward revision 3: restart prefill-0"
    )
    assert out.stdout == "mori: rollout 7 (restart by roll) done in 8.2 s (revision 3 applied)\n"
    api = FakeApi({f"{BASE}/rollout": [body(DONE), body(restarting)], f"{BASE}/restart": [[]]})
    quick = run(monkeypatch, api, "restart", "mori", "--no-wait")
    assert quick.stdout == "rollout 7 running; `pdctl rollout status mori` follows it\n"


def test_apply_says_the_rollout_it_began_or_the_pending_revision(tmp_path: Path, monkeypatch):
    spec = tmp_path / "mori.yaml"
    spec.write_text("name: mori\nmodel: tiny\n")
    current = {"name": "mori", "revision": 2, "spec": {"model": "tiny"}, "ports": {}}
    stored = current | {"revision": 3, "spec": {"model": "small"}}
    api = FakeApi(
        {
            BASE: [current],
            f"PUT {BASE}": [stored | {"state": "in_progress", "rollout": AT_1}],
            f"{BASE}/rollout": [body(AT_2), body(DONE)],
        }
    )
    out = run(monkeypatch, api, "apply", "-f", str(spec), "--strategy", "roll", "--wait")
    assert out.exit_code == 0, out.output
    query = {"reason": None, "dry_run": None, "rollout": None, "strategy": "roll"}
    assert api.sent == [(f"PUT {BASE}", {"name": "mori", "model": "tiny"}, query)]
    assert out.stdout.splitlines() == [
        "mori: revision 2 -> 3",
        '  ~ model: "tiny" -> "small"',
        "rolling out revision 3 by roll: restart prefill-0; follow with `pdctl rollout "
        "status mori`",
        "mori: rollout 4 (apply by roll) done in 8.2 s (revision 3 applied)",
    ]
    api = FakeApi(
        {BASE: [current], f"PUT {BASE}": [stored | {"state": "pending", "rollout": None}]}
    )
    out = run(monkeypatch, api, "apply", "-f", str(spec), "--no-rollout")
    assert out.stdout.splitlines()[-1] == (
        "stored revision 3 as pending: `pdctl restart mori` rolls it out"
    )
    assert api.sent[0][2]["rollout"] == "false"


def test_a_rollout_ends_only_once_its_rollback_has() -> None:
    assert views.ongoing(AT_1, AT_1)
    assert views.ongoing(FAILING, FAILING)  # failed, its rollback about to begin
    assert views.ongoing(FAILING, ROLLBACK)
    assert not views.ongoing(FAILING, ROLLED_BACK)  # a stopped plane left it without an end
    assert not views.ongoing(FAILED, ROLLED_BACK)
    assert not views.ongoing(DONE, None)
