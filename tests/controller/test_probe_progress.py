"""A /health that times out on a process still using CPU is a stall, not a hang
(controller/supervise/probing.py): real processes, read through /proc."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from controller.backends.local import ProcessRecord
from controller.backends.procfs import cpu_demand, cpu_ticks
from controller.supervise.probing import STALL_LIMIT_S, _made_progress, stall_excused


def unit(pid: int, address: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        machine=SimpleNamespace(pid=pid),
        launch=SimpleNamespace(address=address),
        cpu_seen=None,
        record=None,
    )


def used_cpu(pid: int) -> None:
    start = cpu_ticks(pid) or 0
    deadline = time.monotonic() + 10
    while (cpu_ticks(pid) or 0) <= start and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_busy_process_made_progress_and_a_stopped_one_did_not():
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        u = unit(busy.pid)
        assert _made_progress(u) is False  # the first sample: nothing to compare with
        used_cpu(busy.pid)
        assert _made_progress(u) is True
        os.kill(busy.pid, signal.SIGSTOP)
        time.sleep(0.2)
        assert cpu_ticks(busy.pid) is None  # stopped: no progress, whatever it used
        assert _made_progress(u) is False
        assert _made_progress(unit(busy.pid, address="127.0.0.2")) is False  # another node's
    finally:
        busy.kill()
        busy.wait(10)


def test_cpu_ticks_reads_user_and_system_time(tmp_path):
    stat = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 17 5 0 0 20 0 1 0 99 0 0"
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text(stat)
    assert cpu_ticks(42, tmp_path) == 22
    (tmp_path / "42" / "stat").write_text(stat.replace(") S ", ") T "))
    assert cpu_ticks(42, tmp_path) is None
    assert cpu_ticks(43, tmp_path) is None


def test_a_stall_with_progress_is_excused_for_a_while_then_counts():
    assert stall_excused(None, 10.0) is False  # not stalled
    assert stall_excused(10.0, 10.0) is True
    assert stall_excused(10.0, 10.0 + STALL_LIMIT_S - 1) is True
    assert stall_excused(10.0, 10.0 + STALL_LIMIT_S) is False  # a livelock: its silence counts


def test_cpu_demand_sums_run_and_queue_time_over_threads(tmp_path):
    stat = "42 (vllm) S 1 2 3 4 5 6 7 8 9 10 17 5 0 0 20 0 1 0 99 0 0"
    (tmp_path / "42" / "task" / "42").mkdir(parents=True)
    (tmp_path / "42" / "task" / "43").mkdir()
    (tmp_path / "42" / "stat").write_text(stat)
    (tmp_path / "42" / "task" / "42" / "schedstat").write_text("100 50 3\n")
    (tmp_path / "42" / "task" / "43" / "schedstat").write_text("7 3 1\n")
    assert cpu_demand(42, tmp_path) == 160
    # waiting on the run queue alone (a starved host) is demand too
    (tmp_path / "42" / "task" / "43" / "schedstat").write_text("7 900 1\n")
    assert cpu_demand(42, tmp_path) == 1057
    (tmp_path / "42" / "stat").write_text(stat.replace(") S ", ") T "))
    assert cpu_demand(42, tmp_path) is None  # stopped
    (tmp_path / "42" / "stat").write_text(stat)
    for task in ("42", "43"):
        (tmp_path / "42" / "task" / task / "schedstat").unlink()
    assert cpu_demand(42, tmp_path) == 22  # no schedstat: its CPU ticks
    assert cpu_demand(43, tmp_path) is None


def test_a_sleeping_process_makes_no_demand():
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)  # past its start
        u = unit(idle.pid)
        _made_progress(u)
        time.sleep(0.3)
        assert _made_progress(u) is False  # blocked: neither runs nor waits to
    finally:
        idle.kill()
        idle.wait(10)


def test_a_process_on_another_node_is_judged_by_the_demand_its_node_read():
    """A Ray node's actor reads the child's CPU demand with its state (ray_host.py): a busy
    decode there was replaced 9 s after it became ready, its silence counted."""
    remote = unit(4242, address="127.0.0.13")
    assert _made_progress(remote) is False  # no record: its silence counts
    remote.record = ProcessRecord("decode-0", 4242, cpu_demand=1_000)
    assert _made_progress(remote) is False  # the first reading
    remote.record = ProcessRecord("decode-0", 4242, cpu_demand=5_000)
    assert _made_progress(remote) is True
    remote.record = ProcessRecord("decode-0", 4242, cpu_demand=5_000)
    assert _made_progress(remote) is False  # stopped or blocked: no more demand
    remote.record = ProcessRecord("decode-0", 4242, cpu_demand=None)
    assert _made_progress(remote) is False  # its node could not read it
    remote.record = ProcessRecord("decode-0", 999, cpu_demand=9_000)
    assert _made_progress(remote) is False  # another process's record: not this one's demand
