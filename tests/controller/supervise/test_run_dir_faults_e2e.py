"""A state file the supervisor and the shim cannot write, with real processes: a SIGKILLed
decode is seen dead and restarted, the deployment is degraded and says why, until the path
works again (issue 39, broken 2). Without root tricks: the state file is made a directory,
which neither a rename nor an unlink can replace, as a read-only mount refuses both."""

import asyncio
import contextlib
import os
import signal

import pytest

from controller.backends import procfs
from controller.launch.ports import allocate
from controller.supervise.supervisor import Supervisor
from tests.controller.supervise.test_supervisor_e2e import (
    all_pids,
    by_name,
    kill_everything,
    settings,
    spec_with_free_ports,
    tokens_through,
)

pytestmark = pytest.mark.e2e


def test_a_killed_decode_whose_state_file_cannot_be_written_is_restarted_and_degrades(tmp_path):
    run_dir = tmp_path / "run"
    spec = spec_with_free_ports()
    ports = allocate(spec)
    seen: list[tuple[int, int | None]] = []

    async def scenario():
        events = []
        sup = Supervisor(settings(run_dir), on_event=lambda *e: events.append(e))
        await sup.open()
        try:
            await sup.start(spec.name, spec, ports)
            await sup.wait_running(spec.name, 30)
            seen.extend(all_pids(run_dir))
            state_file = run_dir / spec.name / "decode-0" / "state.json"
            state_file.unlink()
            (state_file / "in-the-way").mkdir(parents=True)
            decode = by_name(sup.status(spec.name))["decode-0"]
            os.kill(decode["pid"], signal.SIGKILL)

            # Seen dead from its process (its state file says nothing), then restarted.
            await sup.wait_for(
                spec.name,
                lambda us: by_name(us)["decode-0"]["pid"] != decode["pid"],
                10,
                "seen dead",
            )
            units = await sup.wait_for(
                spec.name,
                lambda us: all(u["state"] == "RUNNING" for u in us),
                30,
                "restarted",
            )
            seen.extend((u["pid"], procfs.start_time(u["pid"])) for u in units)
            faults = [msg for _, k, msg, _ in events if k == "run_dir_fault"]
            assert len(faults) == 1 and str(state_file) in faults[0], events
            assert all(str(state_file) in (u["degraded"] or "") for u in units)
            status, body = await tokens_through(f"http://127.0.0.1:{ports.proxy}")
            assert status == 200, body

            # The path works again: no longer degraded, and told so.
            (state_file / "in-the-way").rmdir()
            state_file.rmdir()
            await sup.wait_for(
                spec.name, lambda us: all(u["degraded"] is None for u in us), 10, "recovered"
            )
            assert any(k == "run_dir_recovered" for _, k, _, _ in events)
            await sup.stop(spec.name, wait=20)
        finally:
            await sup.close()

    try:
        asyncio.run(scenario())
    finally:
        with contextlib.suppress(Exception):
            kill_everything(seen)
