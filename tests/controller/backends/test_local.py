"""The real process backend: `pdctl run-instance` started the way the supervisor starts it,
from a working directory that is not the repo's, with secrets in our own environment."""

import asyncio
import contextlib
import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from controller.backends.local import ShimBackend

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)


@pytest.fixture
def spawned():
    """Records the backend started; their process groups are killed at the end."""
    records = []
    yield records
    for record in records:
        for pid in (record.child_pid, record.shim_pid):
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                os.killpg(pid, signal.SIGKILL)


def test_a_relative_run_dir_means_the_same_folder_to_the_shim(tmp_path, monkeypatch, spawned):
    monkeypatch.chdir(tmp_path)  # not the repo: the shim itself runs from there
    backend = ShimBackend()
    folder = Path("runs") / "dep"
    record = asyncio.run(backend.spawn(folder, "sleeper", SLEEPER, {}))
    spawned.append(record)
    assert (tmp_path / "runs" / "dep" / "sleeper" / "state.json").is_file()
    assert backend.read(folder, "sleeper") == record and backend.running(record)
    deadline = time.monotonic() + 10
    while backend.log_tail(folder, "sleeper", 1) != ["up"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.log_tail(folder, "sleeper", 1) == ["up"]


def test_the_child_gets_a_minimal_environment_and_its_own_entries(tmp_path, monkeypatch, spawned):
    monkeypatch.setenv("PDCTL_OPERATOR_TOKENS", "alice:op-s3cret")
    monkeypatch.setenv("PDCTL_VIEWER_TOKENS", "bob:view-s3cret")
    monkeypatch.setenv("SOME_CLOUD_KEY", "k3y")
    backend = ShimBackend()
    record = asyncio.run(backend.spawn(tmp_path, "sleeper", SLEEPER, {"VLLM_MARK": "mine"}))
    spawned.append(record)
    for pid in (record.child_pid, record.shim_pid):
        env = environ(pid)
        assert env["VLLM_MARK"] == "mine" and env["PATH"] == os.environ["PATH"]
        assert not {"PDCTL_OPERATOR_TOKENS", "PDCTL_VIEWER_TOKENS", "SOME_CLOUD_KEY"} & set(env)


def test_state_and_logs_are_0600_in_0700_directories(tmp_path, spawned):
    old = os.umask(0o022)  # the usual one: it would make them 0644 and 0755
    try:
        record = asyncio.run(ShimBackend().spawn(tmp_path / "dep", "sleeper", SLEEPER, {}))
        spawned.append(record)
    finally:
        os.umask(old)
    folder = tmp_path / "dep" / "sleeper"
    deadline = time.monotonic() + 10
    while not (folder / "output.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mode(tmp_path / "dep") == mode(folder) == 0o700
    assert mode(folder / "state.json") == mode(folder / "output.log") == 0o600


def test_a_launch_through_nice_is_running_and_stops_on_sigterm(tmp_path, spawned):
    """A launcher wrapped in `nice` (PDCTL_VLLM_LAUNCHER="nice -n 10 vllm serve") runs as the
    command nice exec'd: it is still recognised as ours, so a stop signals it (it used to be
    taken for a stranger: never signalled, FATAL "did not exit after SIGKILL", left running)."""
    backend = ShimBackend()
    record = asyncio.run(backend.spawn(tmp_path, "niced", ["nice", "-n", "5", *SLEEPER], {}))
    spawned.append(record)
    deadline = time.monotonic() + 10
    while backend.log_tail(tmp_path, "niced", 1) != ["up"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.running(record)
    assert os.getpriority(os.PRIO_PROCESS, record.child_pid) == 5
    backend.signal(record, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while backend.running(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not backend.running(record)
