"""The rollout verbs as an on-call engineer runs them, against a real `pdctl serve` (tokens on)
with stand-in engines: a change applied to a running deployment is rolled out and followed;
one stored pending is rolled out by `restart`; a slow one is aborted mid-way and rolled back;
`undo` goes back; and every refusal is the server's one line with its exit code."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.stack import wait_until
from tests.terminal.verbs_run import MORIIO_YAML, TOKENS, VIEWER_SECRET, Follower, pdctl

pytestmark = pytest.mark.e2e

NAME = "roll"
SLOW = "start_time_scale: 1000\n"  # the stand-in opens its port only after a long while


@pytest.fixture
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of each test's own (xdist may run them on two workers)."""
    plane = ControlPlane(tmp_path_factory.mktemp("rollout"), env=TOKENS).start()
    try:
        yield plane
    finally:
        try:
            pdctl("stop", NAME, "--timeout", "30", server=plane.server.url)
        finally:  # a test timed out mid-stop still leaves nothing running
            plane.close()


def spec(tmp: Path, hold_deadline_s: int = 60, extra: str = "") -> str:
    path = tmp / f"{NAME}-{len(list(tmp.iterdir()))}.yaml"
    text = MORIIO_YAML.format(name=NAME).replace("60}", f"{hold_deadline_s}}}")
    path.write_text(text + extra)
    return str(path)


def rollout_now(url: str) -> dict:
    """GET .../rollout's `rollout`: the one running, else the last."""
    return json.loads(pdctl("rollout", "status", NAME, "--json", server=url).stdout)["rollout"]


def settled(url: str) -> dict:
    """Once no rollout runs (however the last one ended): GET .../rollout."""
    pdctl("rollout", "status", NAME, "--timeout", "120", server=url)
    return json.loads(pdctl("rollout", "status", NAME, "--json", server=url).stdout)


def start(url: str) -> None:
    started = pdctl("start", NAME, "--timeout", "90", server=url)
    assert started.returncode == 0, started.stderr
    settled(url)


def test_refusals_are_the_servers_line_with_their_exit_code(plane, tmp_path) -> None:
    url = plane.server.url
    assert pdctl("apply", "-f", spec(tmp_path), server=url).returncode == 0
    stopped = pdctl("rollout", "undo", NAME, server=url)
    assert (stopped.returncode, stopped.stderr) == (
        5,
        f"pdctl rollout undo: error: 409: deployment '{NAME}' is not running: edit it, or "
        "start it\n",
    )
    start(url)

    nothing = pdctl("rollout", "abort", NAME, server=url)
    assert (nothing.returncode, nothing.stderr) == (
        5,
        f"pdctl rollout abort: error: 409: no rollout of '{NAME}' is in progress: nothing to "
        "abort\n",
    )
    missing = pdctl("rollout", "undo", NAME, "--to-revision", "99", server=url)
    assert (missing.returncode, missing.stderr) == (
        1,
        f"pdctl rollout undo: error: 404: deployment '{NAME}' has no revision 99 (current: 1)\n",
    )
    first = pdctl("rollout", "undo", NAME, server=url)
    assert first.returncode == 5
    assert "has no applied revision before 1 to go back to" in first.stderr
    same = pdctl("rollout", "undo", NAME, "--to-revision", "1", server=url)
    assert same.returncode == 1 and "revision 1 is the one desired now" in same.stderr
    viewer = pdctl("rollout", "abort", NAME, token=VIEWER_SECRET, server=url)
    assert viewer.returncode == 4 and "may only read" in viewer.stderr
    unknown = pdctl("rollout", "status", "nope", server=url)
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "pdctl rollout status: error: 404: no deployment named 'nope'\n",
    )


def test_apply_rolls_out_restart_rolls_pending_abort_and_undo(plane, tmp_path) -> None:
    url = plane.server.url
    assert pdctl("apply", "-f", spec(tmp_path), server=url).returncode == 0
    start(url)
    assert settled(url)["running"]

    # A change to a running deployment: rolled out, and said so; status follows it.
    dry = pdctl("apply", "-f", spec(tmp_path, 45), "--dry-run", server=url)
    assert dry.returncode == 0, dry.stderr
    said = dry.stdout.splitlines()
    assert said[0] == f"{NAME}: revision 1 -> 2 (dry run: nothing stored)"
    assert said[2].startswith("would roll out by ") and "restart proxy" in said[2]
    applied = pdctl("apply", "-f", spec(tmp_path, 45), "--reason", "shorter hold", server=url)
    assert applied.returncode == 0, applied.stderr
    said = applied.stdout.splitlines()
    assert said[0] == f"{NAME}: revision 1 -> 2"
    assert said[-1].startswith("rolling out revision 2 by ")
    assert "restart proxy" in said[-1]
    assert said[-1].endswith(f"follow with `pdctl rollout status {NAME}`")
    followed = pdctl("rollout", "status", NAME, "--timeout", "120", server=url)
    assert followed.returncode == 0, followed.stderr
    assert " done in " in followed.stdout or "applied: every process" in followed.stdout

    # Stored pending, not rolled out: status says it is not applied; restart rolls it out.
    stored = pdctl("apply", "-f", spec(tmp_path, 50), "--no-rollout", server=url)
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout.splitlines()[-1] == (
        f"stored revision 3 as pending: `pdctl restart {NAME}` rolls it out"
    )
    once = pdctl("rollout", "status", NAME, "--once", server=url)
    assert once.returncode == 1 and "revision 3 pending, not applied" in once.stdout
    restarted = pdctl("restart", NAME, "--timeout", "120", server=url)
    assert restarted.returncode == 0, restarted.stderr
    assert "(apply by " in restarted.stderr.splitlines()[0]
    assert " done in " in restarted.stdout and "(revision 3 applied)" in restarted.stdout
    assert settled(url)["applied"]

    # A revision whose instances take long to start: aborted mid-way, then rolled back.
    slow = pdctl("apply", "-f", spec(tmp_path, 50, SLOW), "--reason", "slow", server=url)
    assert slow.returncode == 0, slow.stderr
    watch = Follower("rollout", "status", NAME, server=url)
    try:
        wait_until(
            lambda: "wait_ready" in (rollout_now(url)["current"] or ""), 60, "a start to wait on"
        )
        aborted = pdctl("rollout", "abort", NAME, "--reason", "too slow", server=url)
        assert aborted.returncode == 0, aborted.stderr
        assert aborted.stderr.splitlines()[0].startswith(f"{NAME}: aborting rollout ")
        assert "it rolls back to revision 3" in aborted.stderr.splitlines()[0]
        assert " aborted in " in aborted.stdout and "rolled back by rollout " in aborted.stdout
        assert aborted.stdout.rstrip().endswith(": done")
        assert watch.proc.wait(timeout=60) == 1  # the followed rollout was aborted
    finally:
        watch.close()

    history = pdctl("rollout", "history", NAME, server=url)
    rows = [line.split() for line in history.stdout.splitlines()[1:]]
    assert [(r[3], r[6]) for r in rows[:2]] == [("rollback", "done"), ("apply", "aborted")]

    back = pdctl("rollout", "undo", NAME, "--to-revision", "2", "--reason", "back", server=url)
    assert back.returncode == 0, back.stderr
    assert "(undo by " in back.stderr.splitlines()[0]
    assert "(undo to revision 2: back)" in back.stderr.splitlines()[0]
    assert " done in " in back.stdout
    shown = json.loads(pdctl("show", NAME, "--json", server=url).stdout)["deployment"]
    assert shown["spec"]["proxy"]["hold_deadline_s"] == 45.0
