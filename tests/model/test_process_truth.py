"""tests/model/process_truth.py on a fake /proc tree: a status that agrees with the processes,
a RUNNING row whose pid is gone or does not listen, and a shim the status does not show."""

from __future__ import annotations

from pathlib import Path

from tests.model.process_truth import mismatches

RUN_DIR = Path("/runs/mori")


def process(proc: Path, pid: int, ppid: int, argv: list[str], listens: int | None = None) -> None:
    """A live process in the fake /proc: its stat, command line, and a listening socket."""
    folder = proc / str(pid)
    (folder / "fd").mkdir(parents=True)
    rest = ["S", str(ppid)] + ["0"] * 17 + [str(1000 + pid)]  # field 22: the start time
    (folder / "stat").write_text(f"{pid} (python) {' '.join(rest)}\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    if listens is not None:
        inode = str(50000 + pid)
        (folder / "fd" / "3").symlink_to(f"socket:[{inode}]")
        line = f"0: 0100007F:{listens:04X} 00000000:0000 0A 0 0 0 0 0 0 {inode}\n"
        with (proc / "net" / "tcp").open("a") as table:
            table.write(line)


def shim(proc: Path, pid: int, name: str, child: int, port: int) -> None:
    argv = ["python", "pdctl.py", "run-instance", "--run-dir", str(RUN_DIR), "--name", name]
    process(proc, pid, 1, [*argv, "--", "python", "pdctl.py", "sim", "--port", str(port)])
    process(proc, child, pid, ["python", "pdctl.py", "sim", "--port", str(port)], port)


def row(name: str, pid: int | None, port: int, state: str = "RUNNING") -> dict:
    return {"name": name, "state": state, "pid": pid, "ports": {"http": port}}


def fake_proc(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text("  sl  local_address rem_address   st ...\n")
    shim(proc, 100, "prefill-0", 101, 20002)
    return proc


def test_a_status_that_agrees_with_the_processes_has_no_mismatch(tmp_path):
    assert mismatches([row("prefill-0", 101, 20002)], RUN_DIR, fake_proc(tmp_path)) == []


def test_a_running_row_whose_pid_is_gone_or_does_not_listen_is_a_mismatch(tmp_path):
    proc = fake_proc(tmp_path)
    gone = mismatches([row("prefill-0", 999, 20002)], RUN_DIR, proc)
    assert "prefill-0 is RUNNING as pid 999, which is not alive" in gone
    elsewhere = mismatches([row("prefill-0", 101, 20005)], RUN_DIR, proc)
    assert any("does not listen on 20005" in w for w in elsewhere), elsewhere


def test_a_shim_the_status_does_not_show_or_shows_stopped_is_a_mismatch(tmp_path):
    proc = fake_proc(tmp_path)
    shim(proc, 200, "decode-a-0", 201, 20010)
    hidden = mismatches([row("prefill-0", 101, 20002)], RUN_DIR, proc)
    assert hidden == ["shim pid 200 runs 'decode-a-0', which the status does not show"]
    fatal = mismatches(
        [row("prefill-0", 101, 20002), row("decode-a-0", None, 20010, "FATAL")], RUN_DIR, proc
    )
    assert fatal == ["decode-a-0 is FATAL in the status, but its shim (pid 200) runs"]
