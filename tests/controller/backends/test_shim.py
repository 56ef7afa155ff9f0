"""`pdctl run-instance`: detaches, owns the child's output and logs, records pid, start time and
exit code, forwards SIGTERM to the child's group. Real (small) processes."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from controller.backends import procfs, shim
from controller.backends.local import log_tail
from harness.processes import ROOT

CHATTY = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), "
    "sys.exit(3)))\n"
    "for i in range(100000):\n"  # one write per line: a TERM between two would split one
    "    sys.stdout.write(f'line {i}\\n'); sys.stdout.flush()\n"
    "    time.sleep(0.01)\n"
)


def run_instance(tmp_path, name, *argv, extra=()):
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "run-instance",
            "--run-dir",
            str(tmp_path),
            "--name",
            name,
            *extra,
            "--",
            *argv,
        ],
        capture_output=True,
        timeout=20,
        check=False,
        cwd=ROOT,
    )


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise TimeoutError(predicate)


@pytest.fixture
def reaper(tmp_path):
    """Kill whatever process groups a test leaves behind, even when it fails."""
    groups = []
    yield groups
    for state_file in tmp_path.glob("*/state.json"):
        state = json.loads(state_file.read_text())
        groups += [p for p in (state.get("child_pid"), state.get("shim_pid")) if p]
    for pid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def test_run_instance_detaches_keeps_logs_and_records_the_exit(tmp_path, reaper):
    done = run_instance(tmp_path, "chatty", sys.executable, "-c", CHATTY)
    assert done.returncode == 0, done.stderr.decode()
    reported = json.loads(done.stdout)
    state = shim.read_state(tmp_path, "chatty")
    child, shim_pid = state["child_pid"], state["shim_pid"]
    reaper += [child, shim_pid]
    assert reported["child_pid"] == child
    assert state["argv"] == [sys.executable, "-c", CHATTY]
    assert state["child_start_time"] == procfs.start_time(child)
    assert state["exit_code"] is None and state["started_at"] > time.time() - 30
    # The child leads its own process group; the shim has its own session, not ours.
    assert os.getpgid(child) == child
    assert os.getsid(shim_pid) == shim_pid != os.getsid(0)
    log = tmp_path / "chatty" / "output.log"
    wait_for(lambda: log.exists() and log.read_text().count("\n") >= 5)
    # SIGTERM to the shim reaches the child's group; the shim records the code and exits.
    os.kill(shim_pid, signal.SIGTERM)
    state = wait_for(lambda: (s := shim.read_state(tmp_path, "chatty"))["exited_at"] and s)
    assert state["exit_code"] == 3
    assert log_tail(log, 1) == ["got TERM"]
    wait_for(lambda: procfs.start_time(shim_pid) is None)
    assert procfs.start_time(child) is None


def test_sigkill_of_the_group_is_recorded_as_minus_nine(tmp_path, reaper):
    done = run_instance(tmp_path, "sleeper", "sleep", "30")
    assert done.returncode == 0, done.stderr.decode()
    state = shim.read_state(tmp_path, "sleeper")
    reaper += [state["child_pid"], state["shim_pid"]]
    os.killpg(state["child_pid"], signal.SIGKILL)
    state = wait_for(lambda: (s := shim.read_state(tmp_path, "sleeper"))["exited_at"] and s)
    assert state["exit_code"] == -9


def test_a_command_that_cannot_run_fails_the_launch(tmp_path):
    done = run_instance(tmp_path, "missing", "/nonexistent/vllm", "serve")
    assert done.returncode == 1
    assert "cannot run '/nonexistent/vllm'" in done.stderr.decode()
    state = shim.read_state(tmp_path, "missing")
    assert state["exit_code"] == 127 and state["child_pid"] is None


def test_logs_rotate_by_size_keeping_n_files(tmp_path):
    path = tmp_path / "output.log"
    log = shim.RotatingLog(path, max_bytes=100, keep=2)
    for i in range(30):
        log.write(f"line {i:03d} ".encode() * 2 + b"\n")  # 21 bytes
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["output.log", "output.log.1", "output.log.2"]
    assert all(p.stat().st_size <= 100 for p in tmp_path.iterdir())
    assert log_tail(path, 1) == ["line 029 line 029 "]
    # The tail reaches back into the previous file.
    assert len(log_tail(path, 6)) == 6 and log_tail(path, 6)[0].startswith("line 024")


def test_proc_start_time_tells_a_recycled_pid_apart(tmp_path):
    fake = tmp_path / "proc"
    (fake / "77").mkdir(parents=True)
    stat = "77 (a (weird) name) S " + " ".join(["1"] * 18) + " 5555 0 0\n"
    (fake / "77" / "stat").write_text(stat)
    assert procfs.start_time(77, fake) == 5555
    assert procfs.is_same_process(77, 5555, fake)
    assert not procfs.is_same_process(77, 5554, fake)  # same pid, another process
    assert not procfs.is_same_process(78, 5555, fake)
    (fake / "77" / "stat").write_text(stat.replace(" S ", " Z "))
    assert procfs.start_time(77, fake) is None  # a zombie is dead


def test_a_full_disk_stops_the_log_not_the_instance(tmp_path, monkeypatch):
    import errno

    from controller.backends.shim import RotatingLog

    log = RotatingLog(tmp_path / "output.log", max_bytes=1 << 20, keep=2)

    class FullDisk:
        def write(self, chunk):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            pass

    real, log.file = log.file, FullDisk()
    log.write(b"lost line\n")  # no exception: the child keeps running
    assert log.error == "logs stopped: No space left on device" and log.dropped == 10
    log.write(b"also dropped\n")  # before the retry time: not even tried
    assert log.dropped == 23
    log.file = real
    monkeypatch.setattr(log, "_retry_at", 0.0)
    log.write(b"back\n")
    assert log.error is None
    log.close()
    assert (tmp_path / "output.log").read_bytes() == b"back\n"


def test_on_a_full_disk_the_state_file_is_rewritten_in_place(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    (tmp_path / "d").mkdir()
    shim.write_state(tmp_path, "d", {"child_pid": 7, "log_error": None})
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name.endswith(".tmp"):
            real(self, "")  # created, then no room for a byte
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    shim.write_state(tmp_path, "d", {"child_pid": 7, "log_error": "logs stopped: disk full"})
    assert shim.read_state(tmp_path, "d")["log_error"] == "logs stopped: disk full"
    shim.write_state(tmp_path, "d", {"child_pid": 7})  # shorter: no stale tail left behind
    assert shim.read_state(tmp_path, "d") == {"child_pid": 7}
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["state.json"]
