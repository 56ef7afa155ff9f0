"""`pdctl top` against a real `pdctl serve` (tokens on) running a stand-in MoRIIO deployment
under load: in a real 80x24 terminal (tmux) it shows attainment, histogram rows and the
instances, switches window and deployment by key, fits a resize, rides out a restart of the
server, shows an instance stopping, and quits clean on q and on Ctrl-C; --once and a pipe
print plain text; a missing token, an unknown deployment and one not running are one line."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harness.control_plane import ControlPlane
from harness.processes import ROOT, http_get, http_post
from harness.stack import bench_background
from tests.specs import moriio_1p1d
from tests.terminal.top.tmux_pane import TMUX, Pane
from tests.terminal.verbs_run import (
    OPERATOR_SECRET,
    TOKENS,
    VIEWER_SECRET,
    Follower,
    environment,
    pdctl,
)

pytestmark = pytest.mark.e2e

OPERATOR = {"Authorization": f"Bearer {OPERATOR_SECRET}"}
BAR_ROW = re.compile(r"^ *≤\d+(\.\d+)? m?s [█▏▎▍▌▋▊▉]+ +\d+", re.M)


def units(plane: ControlPlane, name: str) -> dict[str, dict]:
    try:
        status, raw = http_get(f"{plane.proc.url}/api/deployments/{name}/status", 10, OPERATOR)
    except OSError:
        return {}
    return {u["name"]: u for u in json.loads(raw)} if status == 200 else {}


def wait_units(plane: ControlPlane, name: str, state: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = units(plane, name)
        if found and all(u["state"] == state for u in found.values()):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{name} not all {state}: {units(plane, name)}")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    tmp = tmp_path_factory.mktemp("top")
    plane = ControlPlane(tmp, env=TOKENS).start()
    load = None
    try:
        ports = {}
        for name in ("mori", "idle"):
            status, created = http_post(
                f"{plane.proc.url}/api/deployments",
                moriio_1p1d(name, tp=1, mode="read", model="tiny"),
                30,
                OPERATOR,
            )
            assert status == 201, created
            ports[name] = created["ports"]["proxy"]
        status, body = http_post(f"{plane.proc.url}/api/deployments/mori/start", {}, 30, OPERATOR)
        assert status == 202, body
        wait_units(plane, "mori", "RUNNING")
        load = bench_background(f"http://127.0.0.1:{ports['mori']}", tmp, "load", 4, 800)
        yield plane
    finally:
        if load is not None:
            load.kill()
            load.wait(timeout=10)
        if plane.proc is not None and plane.proc.proc.poll() is None:
            http_post(f"{plane.proc.url}/api/deployments/mori/stop", {}, 30, OPERATOR)
        plane.close()


def top(plane: ControlPlane, *args: str, token: str | None = VIEWER_SECRET, timeout: float = 60):
    return pdctl("top", *args, token=token, server=plane.proc.url, timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess, code: int, said: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("pdctl top: error: ") and said in done.stderr, done.stderr


def test_no_token_when_tokens_are_on_is_one_line_exit_4(plane) -> None:
    one_line_error(top(plane, "--once", token=None), 4, "(set PDCTL_TOKEN)")
    one_line_error(top(plane, "--once", token="wrong"), 4, "401")


def test_an_unknown_deployment_is_one_line_naming_the_known(plane) -> None:
    one_line_error(top(plane, "nope", "--once"), 1, "no deployment named 'nope' (there are: ")


def test_a_deployment_not_running_says_so(plane) -> None:
    done = top(plane, "idle", "--once", "--timeout", "4")
    one_line_error(done, 1, "idle is not running (start it: pdctl start idle)")


def test_once_prints_one_frame_as_text_or_json(plane) -> None:
    text = top(plane, "mori", "--once", "--window", "10s")
    assert text.returncode == 0, text.stderr
    assert "\x1b" not in text.stdout
    lines = text.stdout.splitlines()
    assert re.match(r"pdctl top . mori \(2/2\) . window 10s . simulated . once ", lines[0])
    assert re.search(r"^SLO attainment \d", text.stdout, re.M)
    assert re.search(r"^prefill-0 +prefill +RUNNING +up +127\.0\.0\.1 +read", text.stdout, re.M)
    assert "keys:" not in text.stdout
    as_json = top(plane, "mori", "--once", "--json")
    frame = json.loads(as_json.stdout)
    assert frame["type"] == "frame" and frame["window"] == "1m" and frame["deployment"] == "mori"


def test_a_pipe_gets_frames_as_plain_text(plane) -> None:
    follower = Follower(
        "top", "mori", "--interval", "1", server=plane.proc.url, token=VIEWER_SECRET
    )
    try:
        follower.wait_for("SLO attainment", 30)
        follower.wait_for("Events", 10)
        follower.wait_for("SLO attainment", 10)  # a second frame follows
    finally:
        follower.close()
    assert not any("\x1b" in line for line in follower.seen)
    assert not any("keys:" in line for line in follower.seen)  # nothing reads keys on a pipe


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)")
def test_top_in_a_real_80x24_terminal(plane) -> None:
    with top_pane(plane) as pane:
        screen = pane.wait_for(r"^SLO attainment \d+(\.\d)?%", 40)
        screen = pane.wait_for(BAR_ROW.pattern, 20)
        assert pane.alternate_screen()
        fits(screen, 80, 24)
        text = "\n".join(screen)
        assert screen[0].startswith("pdctl top · mori (2/2) · window 1m · simulated · live")
        assert re.search(r"^TTFT +\d+ in the window +ITL +\d+ in the window", text, re.M)
        assert re.search(r"^p50 \S+ m?s +p90 \S+ m?s +p99 \S+ m?s", text, re.M)
        assert "SLO 1.00 s" in text and "SLO 50 ms" in text  # the deployment's SLO lines
        assert re.search(r"^decode-0 +decode +RUNNING +up +127\.0\.0\.1 +read ", text, re.M)
        assert screen[-1].startswith("keys: 1 10s 2 [1m] 3 5m") and "q quit" in screen[-1]

        pane.send("1")  # the 10 s window
        pane.wait_for(r"window 10s · simulated · live[\s\S]*^SLO attainment \d", 20)
        assert "2 1m" in pane.wait_for(r"^keys: 1 \[10s\]", 5)[-1]
        pane.send("w")  # and on to the next: 1 min
        pane.wait_for(r"window 1m · simulated · live", 20)

        pane.send("n")  # the next deployment, never started
        pane.wait_for(r"^pdctl top · idle \(1/2\)[\s\S]*^no frames: idle is not running", 20)
        pane.send("p")
        pane.wait_for(r"^pdctl top · mori \(2/2\)[\s\S]*^SLO attainment \d", 20)

        pane.resize(60, 16)
        small = pane.wait_for(lambda s: len(s) <= 16 and "SLO attainment" in "\n".join(s), 20)
        fits(small, 60, 16)
        pane.resize(80, 24)
        fits(pane.wait_for(r"^INSTANCE", 20), 80, 24)

        plane.proc.kill()  # the server goes away: the screen says so and retries
        gone = pane.wait_for(r"^pdctl top · mori .* · retrying in \d+ s +\d\d:", 20)
        assert re.match(r"(cannot reach|disconnected) ", gone[1]), gone
        plane.start()
        pane.wait_for(r"^pdctl top · mori \(2/2\) · window 1m · simulated · live", 60)

        status, body = http_post(f"{plane.proc.url}/api/deployments/mori/stop", {}, 30, OPERATOR)
        assert status == 202, body
        stopped = pane.wait_for(r"^decode-0 +decode +STOPPED +down ", 60)
        assert re.search(r"^prefill-0 +prefill +STOPPED +down ", "\n".join(stopped), re.M)
        assert re.search(r"^\d\d:\d\d:\d\d \S+ +supervisor: mori/\S+: ", "\n".join(stopped), re.M)

        pane.send("q")
        after = pane.wait_for(r"^EXITED rc=0$", 10)
        assert not pane.alternate_screen() and "Traceback" not in "\n".join(after)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)")
def test_ctrl_c_restores_the_terminal(plane) -> None:
    # Wait for stty's whole answer, not only the exit line: the screen read between the two
    # once lacked it (the fresh-clone CI).
    with top_pane(plane, "mori", after="stty -a; echo STTY DONE") as pane:
        pane.wait_for(r"^pdctl top · mori", 40)
        pane.send("C-c")
        after = "\n".join(pane.wait_for(r"^EXITED rc=0$[\s\S]*^STTY DONE$", 10))
        assert not pane.alternate_screen() and "Traceback" not in after
        assert re.search(r"(^|\s)icanon(\s|$)", after) and re.search(r"(^|\s)echo(\s|$)", after)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)")
def test_ctrl_z_gives_the_terminal_back_until_fg(plane) -> None:
    env = environment(VIEWER_SECRET, None, plane.proc.url)
    pane = Pane("bash --norc --noprofile -i", env, str(ROOT), 80, 24)  # a shell with jobs
    try:
        pane.send(f"{sys.executable} pdctl.py top mori", "Enter")
        pane.wait_for(r"^pdctl top · mori", 40)
        pane.send("C-z")
        pane.wait_for(r"Stopped", 10)
        assert not pane.alternate_screen()
        pane.send("fg", "Enter")
        pane.wait_for(r"^pdctl top · mori[\s\S]*^keys: ", 20)
        assert pane.alternate_screen()
        pane.send("q")
        pane.wait_for(lambda s: not pane.alternate_screen(), 10)
        pane.send("echo rc=$?", "Enter")
        pane.wait_for(r"^rc=0$", 10)
    finally:
        pane.close()


@contextlib.contextmanager
def top_pane(plane: ControlPlane, *args: str, after: str = "true") -> Iterator[Pane]:
    """`pdctl top ARGS` in an 80x24 tmux pane; its exit code, then `after`, shown when it ends."""
    env = environment(VIEWER_SECRET, None, plane.proc.url)
    command = (
        f"{sys.executable} pdctl.py top {' '.join(args)}; echo EXITED rc=$?; {after}; sleep 300"
    )
    pane = Pane(command, env, str(ROOT), 80, 24)
    try:
        yield pane
    finally:
        pane.close()


def fits(screen: list[str], width: int, height: int) -> None:
    assert len(screen) <= height, screen
    assert all(len(line) <= width for line in screen), [
        line for line in screen if len(line) > width
    ]
