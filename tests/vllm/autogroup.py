"""The engines' sessions run at a lower CPU priority than everything else the suite runs.

`nice` alone does nothing here: with kernel.sched_autogroup_enabled=1 (most kernels' default)
the scheduler first shares the CPU between sessions, and pdctl starts each instance in a
session of its own (its shim's), as by_hand.py does. Measured on this machine: two busy loops
in two sessions on one core, one under `nice -n 10`, got 29% each; with the niced one's
session autogroup at 10, 5% and 41%. So a thread lowers the autogroup of every session holding
a process that carries the run's marker (the engines, and their engine cores), as they appear:
restarted engines get a new session, and are lowered again. Only sessions an engine's shim
(`pdctl run-instance`) or the engine itself leads: an engine on a Ray node shares the session
of Ray's worker, and lowering that took Ray's own processes down with it (a decode there went
unanswered on /health for 3 s right after it became ready).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.vllm.harness import marked

AUTOGROUP_NICE = 10
EVERY_S = 0.5


def lower(marker: str, nice: int = AUTOGROUP_NICE, proc: Path = Path("/proc")) -> int:
    """One pass: each marked process's session autogroup set to `nice`; how many were set.
    Processes gone meanwhile, and kernels without autogroups, are passed over."""
    lowered = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or not marked(int(entry.name), marker):
            continue
        if not _led_by_an_instance(entry, proc):
            continue
        path = entry / "autogroup"
        with contextlib.suppress(OSError):
            if path.read_text().split()[-1] != str(nice):  # "/autogroup-123 nice 0"
                path.write_text(str(nice))
                lowered += 1
    return lowered


@contextlib.contextmanager
def engines_yield(marker: str, nice: int = AUTOGROUP_NICE) -> Iterator[threading.Thread]:
    """Keep lowering the marked sessions for the life of the block."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(EVERY_S):
            lower(marker, nice)

    thread = threading.Thread(target=loop, name="engines-yield", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(timeout=5)


def _led_by_an_instance(entry: Path, proc: Path) -> bool:
    """The process's session is led by pdctl's shim or by an engine started by hand."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        session = (entry / "stat").read_text().rpartition(")")[2].split()[3]
        leader = (proc / session / "cmdline").read_bytes()
        return b"run-instance" in leader or b"vllm.entrypoints" in leader
    return False
