"""The operator verbs as an on-call engineer runs them, against a real `pdctl serve` (tokens
on) with stand-in engines: apply (create, a revision with its diff, a dry run, a stale edit's
409), start, a switch under load through `pdctl bench --deployment` with nothing lost, refused
switches, events --follow seeing the start and the switch, logs, stop."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.stack import wait_until
from tests.terminal.verbs_run import (
    MORIIO_YAML,
    OPERATOR_SECRET,
    TOKENS,
    Follower,
    argv,
    environment,
    pdctl,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("verbs"), env=TOKENS).start()
    try:
        yield plane
    finally:
        for name in ("mori",):
            pdctl("stop", name, "--timeout", "30", server=plane.proc.url)
        plane.close()


def spec_file(tmp: Path, name: str, text: str, suffix: str = ".yaml") -> Path:
    path = tmp / f"{name}{suffix}"
    path.write_text(text)
    return path


def _done(progress: Path) -> int:
    try:
        return json.loads(progress.read_text())["done"]
    except (OSError, ValueError):
        return 0


def test_apply_creates_revises_dry_runs_and_refuses_a_stale_edit(plane, tmp_path) -> None:
    url = plane.proc.url
    first = spec_file(tmp_path, "a", MORIIO_YAML.format(name="a"))
    created = pdctl("apply", "-f", str(first), "--reason", "first", server=url)
    said = "a created at revision 1: `pdctl start a` runs it\n"
    assert (created.returncode, created.stdout) == (0, said), created.stderr

    changed = spec_file(tmp_path, "a2", MORIIO_YAML.format(name="a").replace("60}", "45}"))
    dry = pdctl("apply", "-f", str(changed), "--dry-run", server=url)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        "a: revision 1 -> 2 (dry run: nothing stored)",
        "  ~ proxy.hold_deadline_s: 60.0 -> 45.0",
    ]
    assert "1 *" in pdctl("history", "a", server=url).stdout  # still at revision 1

    applied = pdctl("apply", "-f", str(changed), "--reason", "shorter hold", server=url)
    assert applied.stdout.splitlines() == [
        "a: revision 1 -> 2",
        "  ~ proxy.hold_deadline_s: 60.0 -> 45.0",
        "stored revision 2 as pending: `pdctl start a` runs it",  # a stopped deployment
    ]
    again = pdctl("apply", "-f", str(changed), server=url)
    assert again.stdout == "a unchanged at revision 2\n"

    # An edit made from revision 1 (the file says so) while revision 2 is current: nothing
    # stored, exit 5, and the line says who wrote revision 2 and what it changed.
    stale = spec_file(tmp_path, "a3", "revision: 1\n" + MORIIO_YAML.format(name="a"))
    refused = pdctl("apply", "-f", str(stale), server=url)
    assert refused.returncode == 5 and refused.stdout == ""
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(
        "pdctl apply: error: 409: deployment 'a' is at revision 2, but this edit"
    )
    assert "revision 2 was written by operator:alice at " in line
    assert line.endswith("(shorter hold), changing proxy.hold_deadline_s")
    assert pdctl("apply", "-f", str(stale), "--revision", "2", server=url).returncode == 0

    history = pdctl("history", "a", server=url).stdout.splitlines()
    assert history[0].split() == ["REVISION", "CREATED", "ACTOR", "STATE", "REASON"]
    assert [row.split()[0] for row in history[1:]] == ["3", "2", "1"]
    assert history[1].split()[1] == "*"
    diff = pdctl("diff", "a", "1", "2", server=url)
    assert diff.stdout.splitlines() == [
        "revision 1 -> 2: 1 change(s)",
        "  ~ proxy.hold_deadline_s: 60.0 -> 45.0",
    ]
    listed = json.loads(pdctl("ls", "--json", server=url).stdout)
    assert [(d["name"], d["revision"]) for d in listed if d["name"] == "a"] == [("a", 3)]


def test_a_spec_the_api_refuses_is_one_line_per_field(plane, tmp_path) -> None:
    bad = spec_file(
        tmp_path,
        "bad",
        "name: bad\nmodel: tiny\ntopology: disaggregated\n"
        "groups: [{name: p, role: prefil}]\nslo: {ttft_ms: -1}\n",
    )
    out = pdctl("apply", "-f", str(bad), server=plane.proc.url)
    assert out.returncode == 2  # a bad spec file: its content as much as its syntax
    assert out.stderr.splitlines() == [
        f"pdctl apply: error: {bad}: groups.0.role: Input should be 'prefill', 'decode', "
        "'colocated', 'encode' or 'render'",
        f"pdctl apply: error: {bad}: slo.ttft_ms: Input should be greater than 0",
    ]
    broken = spec_file(tmp_path, "broken", "{name: [", suffix=".json")
    out = pdctl("apply", "-f", str(broken), server=plane.proc.url)
    assert out.returncode == 2
    assert out.stderr.startswith(f"pdctl apply: error: {broken}: not JSON: ")


def test_bench_of_a_deployment_that_is_not_running_says_so(plane, tmp_path) -> None:
    spec = spec_file(tmp_path, "idle", MORIIO_YAML.format(name="idle"))
    assert pdctl("apply", "-f", str(spec), server=plane.proc.url).returncode == 0
    out = pdctl("bench", "--deployment", "idle", "--server", plane.proc.url, "--num-prompts", "1")
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "Error: --deployment idle: not started: nothing to load (pdctl start idle)"
    )
    missing = pdctl("bench", "--deployment", "nope", "--server", plane.proc.url)
    assert missing.returncode == 1
    assert missing.stderr.strip() == "Error: --deployment nope: 404: no deployment named 'nope'"


def test_start_switch_under_load_follow_events_logs_and_stop(plane, tmp_path) -> None:
    url = plane.proc.url
    spec = spec_file(tmp_path, "mori", MORIIO_YAML.format(name="mori"))
    assert pdctl("apply", "-f", str(spec), server=url).returncode == 0
    events = Follower("events", "mori", "--follow", "--timeout", "150", server=url)
    try:
        events.wait_for("deployment.created", timeout=30)  # the recent ones come first

        started = pdctl("start", "mori", "--timeout", "90", server=url)
        assert started.returncode == 0, started.stderr
        assert started.stdout == "mori: start done: 3 processes: 3 RUNNING\n"
        assert "decode-0: STARTING -> RUNNING" in started.stderr
        events.wait_for("deployment.start")
        shown = pdctl("show", "mori", server=url).stdout.splitlines()
        rows = {line.split()[0]: line.split() for line in shown if line.startswith(("p", "d"))}
        assert rows["decode-0"][1:5] == ["decode", "read", "RUNNING", "healthy"]
        assert "Ready:    3/3" in shown

        progress = tmp_path / "progress.json"
        load = subprocess.Popen(
            argv(
                *("bench", "--deployment", "mori", "--server", url, "--request-rate", "10"),
                *("--num-prompts", "60", "--input-len", "128", "--output-len", "32"),
                *("--result-json", str(tmp_path / "load.json"), "--quiet", "--timeout", "90"),
                *("--progress-file", str(progress)),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(OPERATOR_SECRET, None, None),
        )
        wait_until(lambda: _done(progress) >= 5, 60, "the load under way")  # then switch
        switched = pdctl(
            *("switch", "mori", "--mode", "write", "--strategy", "hold"),
            *("--reason", "ITL spikes", "--timeout", "120"),
            server=url,
        )
        assert switched.returncode == 0, switched.stderr
        # The switch is a rollout: its id is the rollout's (the start was the first).
        assert switched.stdout.startswith("mori: switch 2 to write by hold done in ")
        assert "(revision 2 applied); requests held " in switched.stdout
        assert "  2 step " in switched.stderr  # its steps, live
        _, err = load.communicate(timeout=180)
        assert load.returncode == 0, err
        result = json.loads((tmp_path / "load.json").read_text())
        assert (result["completed"], result["failed"]) == (60, 0)
        assert (result["slo_ttft_ms"], result["slo_itl_ms"]) == (1000.0, 50.0)  # its SLO
        events.wait_for("switch.done")

        already = pdctl("switch", "mori", "--mode", "write", "--reason", "again", server=url)
        assert already.returncode == 5
        assert already.stderr.strip() == (
            "pdctl switch: error: 409: every instance group already runs in write mode"
        )
        roll = pdctl(
            "switch", "mori", "--mode", "read", "--strategy", "roll", "--reason", "x", server=url
        )
        assert roll.returncode == 5
        assert "so it needs two or more of each; this deployment has 1 prefill" in roll.stderr

        logs = pdctl("logs", "mori", "decode-0", "--lines", "5", server=url)
        assert logs.returncode == 0 and "pdctl sim: tiny on 1 x cpu" in logs.stdout
        no_such = pdctl("logs", "mori", "decode-9", server=url)
        assert no_such.returncode == 1 and "mori has no instance 'decode-9'" in no_such.stderr

        events.proc.send_signal(signal.SIGINT)  # Ctrl-C ends a follow cleanly
        assert events.proc.wait(timeout=15) == 0
        assert "Traceback" not in events.proc.stderr.read()
    finally:
        events.close()

    stopped = pdctl("stop", "mori", "--timeout", "60", server=url)
    assert (stopped.returncode, stopped.stdout) == (0, "mori: stop done: 3 processes: 3 STOPPED\n")
    after = json.loads(pdctl("show", "mori", "--json", server=url).stdout)
    assert {u["state"] for u in after["instances"]} == {"STOPPED"}
    assert {g["mode"] for g in after["deployment"]["spec"]["groups"]} == {"write"}
