"""The supervisor's own I/O failures on its run dir are faults, not a stopped supervisor: an
event naming the path and the error, state judged by the process, the restart still tried,
and the deployment degraded until the path can be written again (issue 39, broken 2)."""

import asyncio
import errno
import os
from pathlib import Path

from controller.backends.local import SpawnError
from controller.launch.ports import allocate
from controller.supervise import run_state
from tests.controller.factories import tiny_pair
from tests.controller.fakes import FakeBackend
from tests.controller.supervise.test_supervisor import Harness


class ReadOnlyRunDir(FakeBackend):
    """A run dir mounted read-only at will: unlinking a state file and starting a shim (which
    writes its files) fail as they would, with EROFS."""

    read_only = False

    def forget(self, run_dir: Path, name: str) -> None:
        if self.read_only:
            path = str(Path(run_dir) / name / "state.json")
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        super().forget(run_dir, name)

    async def spawn(self, run_dir, name, argv, env, where=None):
        if self.read_only:
            raise SpawnError(f"{run_dir}/{name}: [Errno 30] Read-only file system")
        return await super().spawn(run_dir, name, argv, env, where)


def unit(h, name):
    return next(u for u in h.sup.status("tiny-pd") if u["name"] == name)


def faults(h, kind="run_dir_fault"):
    return [message for _, k, message, _ in h.events if k == kind]


def test_a_killed_instance_in_a_read_only_run_dir_is_not_running_and_the_deployment_is_degraded(
    tmp_path,
):
    async def scenario():
        h = Harness(tmp_path, backend=ReadOnlyRunDir())
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        assert unit(h, "decode-0")["state"] == "RUNNING"
        assert unit(h, "decode-0").get("degraded") is None
        dead = h.backend.pid("decode-0")
        h.backend.read_only = True
        h.backend.crash("decode-0", -9)
        await h.polls(1, every=0.1)
        # Judged by its process, though its state file could not be dropped.
        decode = unit(h, "decode-0")
        assert decode["state"] == "BACKOFF" and decode["last_exit_code"] == -9
        assert decode["health"] is None
        # One event naming the path and the error; every row says the deployment is degraded.
        told = faults(h)
        assert len(told) == 1
        assert "tiny-pd/decode-0/state.json" in told[0] and "EROFS" in told[0]
        assert all("state.json" in (u["degraded"] or "") for u in h.sup.status("tiny-pd"))
        # The restart is still tried (and fails, as a shim would in a read-only dir), the
        # other processes keep being watched, and the fault is told once, not every pass.
        await h.polls(1, every=1.0)
        assert any(k == "spawn_failed" for _, k, _, _ in h.events)
        assert unit(h, "decode-0")["state"] == "BACKOFF"
        assert unit(h, "prefill-0")["state"] == "RUNNING"
        assert len(faults(h)) == 1
        # Writable again: told so, no longer degraded, and the instance comes back.
        h.backend.read_only = False
        await h.polls(1, every=0.1)
        assert faults(h, "run_dir_recovered")
        assert all(u["degraded"] is None for u in h.sup.status("tiny-pd"))
        for _ in range(3):
            await h.polls(1, every=4.0)
        decode = unit(h, "decode-0")
        assert decode["state"] == "RUNNING" and decode["pid"] != dead

    asyncio.run(scenario())


def test_a_record_the_supervisor_cannot_write_is_an_event_and_written_once_it_can(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        # A real failing write, without root tricks: the record's path is a directory.
        record = h.settings.run_dir / "tiny-pd" / run_state.DEPLOYMENT_FILE
        record.unlink()
        (record / "in-the-way").mkdir(parents=True)
        await h.sup.stop("tiny-pd")  # wanted stopped: that is what must be written
        told = faults(h)
        assert len(told) == 1 and str(record) in told[0]
        assert all(str(record) in (u["degraded"] or "") for u in h.sup.status("tiny-pd"))
        await h.polls(3)  # the stop goes on regardless
        (record / "in-the-way").rmdir()
        record.rmdir()
        await h.polls(1)
        assert faults(h, "run_dir_recovered")
        assert run_state.load_deployment(record)[2] is False  # the stop was written
        assert all(u["degraded"] is None for u in h.sup.status("tiny-pd"))

    asyncio.run(scenario())


def test_an_unreadable_state_file_leaves_the_process_judged_by_what_runs(tmp_path):
    async def scenario():
        from controller.backends.local import ShimBackend

        h = Harness(tmp_path)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        folder = h.settings.run_dir / "tiny-pd"
        (folder / "decode-0" / "state.json").mkdir(parents=True)
        # The real backend's reader: a state file that is a directory reads as none.
        assert ShimBackend().read(folder, "decode-0") is None

    asyncio.run(scenario())


class FrozenStateFiles(ReadOnlyRunDir):
    """A read-only run dir where a shim still starts its process (it reports over its pipe)
    but no state file can change: every read shows the file as it was when it froze."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen: dict[str, object] = {}

    async def spawn(self, run_dir, name, argv, env, where=None):
        return await FakeBackend.spawn(self, run_dir, name, argv, env, where)

    def read(self, run_dir, name):
        if self.read_only and name in self.frozen:
            return self.frozen[name]
        return super().read(run_dir, name)

    def freeze(self, run_dir, name):
        self.frozen[name] = super().read(run_dir, name)
        self.read_only = True


def test_a_stale_state_file_never_hides_the_process_that_runs_now(tmp_path):
    async def scenario():
        backend = FrozenStateFiles()
        h = Harness(tmp_path, backend=backend)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        backend.freeze(h.settings.run_dir / "tiny-pd", "decode-0")
        first = backend.pid("decode-0")
        backend.crash("decode-0", -9)
        await h.polls(1, every=0.1)
        await h.polls(2, every=1.0)  # restarted; its state file still names `first`
        decode = unit(h, "decode-0")
        assert decode["state"] == "RUNNING" and decode["pid"] != first
        second = decode["pid"]
        # Its exit is seen, though the file still shows the first process...
        backend.crash("decode-0", -9)
        await h.polls(1, every=0.1)
        assert unit(h, "decode-0")["state"] == "BACKOFF"
        await h.polls(2, every=2.0)
        third = unit(h, "decode-0")["pid"]
        assert third not in (first, second) and unit(h, "decode-0")["state"] == "RUNNING"
        # ... and a stop signals the process that runs, not the one the file names.
        await h.sup.stop("tiny-pd")
        await h.polls(3)
        assert ("decode-0", 15) in backend.signals
        assert unit(h, "decode-0")["state"] == "STOPPED"

    asyncio.run(scenario())
