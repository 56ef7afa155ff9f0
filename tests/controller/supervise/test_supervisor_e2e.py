"""The supervisor with real processes: stand-ins and `pdctl proxy` under `pdctl run-instance`.

Start a NIXL 1P1D of tiny stand-ins, get tokens through the proxy, kill -9 the decode and
watch it come back, drop the supervisor without stopping anything, adopt everything with a new
one (same pids, logs still growing), stop, and find no process left.
"""

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from controller.backends import procfs, shim
from controller.launch.child_env import child_environment
from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, render
from controller.supervise.machine import Policy
from controller.supervise.supervisor import Supervisor, SupervisorSettings
from harness.processes import ROOT, free_port, http_post
from tests.controller.factories import tiny_pair

pytestmark = pytest.mark.e2e

POLICY = Policy(
    backoff_base=0.2,
    backoff_cap=2.0,
    max_failed_starts=5,
    start_timeout=30.0,
    drain_timeout=2.0,
    term_timeout=5.0,
    kill_timeout=5.0,
)


def settings(run_dir):
    launch = LaunchSettings(
        pdctl_command=(sys.executable, str(ROOT / "pdctl.py")),
        sim_registration_interval=0.2,
        proxy_extra_args=("--health-interval", "0.2", "--heartbeat-scale", "0.1"),
    )
    return SupervisorSettings(
        run_dir=run_dir,
        launch=launch,
        policy=POLICY,
        poll_interval=0.1,
        health_interval=0.2,
        health_failures=25,
    )  # a loaded CI box must not cause restarts


def spec_with_free_ports():
    return tiny_pair(
        "e2e-pd",
        proxy={"port": free_port(), "registry_port": free_port()},
        groups=[
            {
                "name": "prefill",
                "role": "prefill",
                "ports": [{"http": free_port(), "side_channel": free_port()}],
            },
            {
                "name": "decode",
                "role": "decode",
                "ports": [{"http": free_port(), "side_channel": free_port()}],
            },
        ],
    )


def completion(url, tokens=5):
    body = {
        "model": "tiny",
        "prompt": "the quick brown fox " * 8,
        "max_tokens": tokens,
        "ignore_eos": True,
    }
    return http_post(url + "/v1/completions", body, timeout=10)


async def tokens_through(proxy_url, tokens=5, timeout=10.0):
    """POST until the proxy answers 200 (it may still be re-probing a restarted instance)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = await asyncio.to_thread(completion, proxy_url, tokens)
        if status == 200 or time.monotonic() > deadline:
            return status, body
        await asyncio.sleep(0.1)


def by_name(status):
    return {u["name"]: u for u in status}


def all_pids(run_dir):
    pids = []
    for state_file in run_dir.glob("*/*/state.json"):
        state = shim.read_state(state_file.parent.parent, state_file.parent.name) or {}
        pids += [
            (state.get("child_pid"), state.get("child_start_time")),
            (state.get("shim_pid"), state.get("shim_start_time")),
        ]
    return [(pid, start) for pid, start in pids if pid]


def kill_everything(pids):
    for pid, start in pids:
        if procfs.is_same_process(pid, start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def test_start_crash_adopt_stop_with_real_processes(tmp_path):
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
            try:
                await sup.wait_running(spec.name, 30)
            except TimeoutError as err:  # say why, with what the supervisor told its operator
                raise AssertionError(f"{err}\nevents: {events}") from None
            seen.extend(all_pids(run_dir))
            proxy_url = f"http://127.0.0.1:{ports.proxy}"
            status, body = await tokens_through(proxy_url)
            assert status == 200, body
            assert body["usage"]["completion_tokens"] == 5

            # kill -9 the decode: it comes back, with one restart.
            decode = by_name(sup.status(spec.name))["decode-0"]
            os.kill(decode["pid"], signal.SIGKILL)
            await sup.wait_for(
                spec.name,
                lambda us: (
                    by_name(us)["decode-0"]["restarts"] == 1
                    and all(u["state"] == "RUNNING" for u in us)
                ),
                30,
                "restarted",
            )
            after = by_name(sup.status(spec.name))["decode-0"]
            assert after["pid"] != decode["pid"] and after["last_exit_code"] == -9
            assert any(k == "backoff" and "decode-0" in msg for _, k, msg, _ in events)
            seen.extend(all_pids(run_dir))
            status, body = await tokens_through(proxy_url)
            assert status == 200, body
        finally:
            await sup.close()  # a crash: nothing is stopped

        pids = {u["name"]: u["pid"] for u in by_name(sup.status(spec.name)).values()}
        decode_log = run_dir / spec.name / "decode-0" / "output.log"
        size = decode_log.stat().st_size

        sup2 = Supervisor(settings(run_dir), on_event=lambda *e: events.append(e))
        await sup2.open()
        try:
            adopted = by_name(sup2.status(spec.name))
            assert {n: u["pid"] for n, u in adopted.items()} == pids
            assert adopted["decode-0"]["restarts"] == 1
            await sup2.wait_running(spec.name, 15)
            assert {u["pid"] for u in sup2.status(spec.name)} == set(pids.values())
            # The shim still owns the decode's output: a request it logs about grows its log.
            decode_url = f"http://127.0.0.1:{ports.instances['decode-0'].http}"
            bad = {
                "model": "tiny",
                "prompt": "hi",
                "max_tokens": 2,
                "kv_transfer_params": {"do_remote_prefill": True},
            }
            status, _ = await asyncio.to_thread(http_post, decode_url + "/v1/completions", bad)
            assert status == 200
            deadline = time.monotonic() + 10
            while decode_log.stat().st_size == size and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert decode_log.stat().st_size > size
            assert "invalid KVTransferParams" in "\n".join(sup2.log_tail(spec.name, "decode-0", 5))
            status, body = await tokens_through(proxy_url)
            assert status == 200, body

            await sup2.stop(spec.name, wait=20)
            assert {u["state"] for u in sup2.status(spec.name)} == {"STOPPED"}
        finally:
            await sup2.close()

    try:
        asyncio.run(scenario())
        # No process left behind: every child and shim we ever saw is gone.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(procfs.is_same_process(p, s) for p, s in seen):
            time.sleep(0.05)
        assert [p for p, s in seen if procfs.is_same_process(p, s)] == []
    finally:
        kill_everything(seen + all_pids(run_dir))


def test_moriio_instances_are_running_once_registered_with_the_proxy(tmp_path):
    run_dir = tmp_path / "run"

    def group(role):
        return {
            "name": role,
            "role": role,
            "mode": "read",
            "ports": [{"http": free_port(), "handshake": free_port(), "notify": free_port()}],
        }

    spec = tiny_pair(
        "e2e-mori",
        "MoRIIOConnector",
        proxy={"port": free_port(), "registry_port": free_port()},
        groups=[group("prefill"), group("decode")],
    )
    ports = allocate(spec)

    async def scenario():
        sup = Supervisor(settings(run_dir))
        await sup.open()
        try:
            await sup.start(spec.name, spec, ports)
            status = by_name(await sup.wait_running(spec.name, 30))
            assert status["decode-0"]["registration"] is True
            assert status["prefill-0"]["mode"] == "read"
            status, body = await tokens_through(f"http://127.0.0.1:{ports.proxy}", 4)
            assert status == 200, body
            assert body["usage"]["completion_tokens"] == 4
            await sup.stop(spec.name, wait=20)
        finally:
            await sup.close()

    try:
        asyncio.run(scenario())
    finally:
        kill_everything(all_pids(run_dir))


def test_an_instance_whose_port_is_taken_goes_fatal_saying_so(tmp_path):
    """The on-call case: the decode's port is held by something else. No copy is started
    that could only fail to bind (while the holder answered its health probe); every start
    fails, the decode goes FATAL, and the event log says which port and who holds it."""
    run_dir = tmp_path / "run"
    spec = spec_with_free_ports()
    ports = allocate(spec)
    taken = ports.instances["decode-0"].http
    events = []

    async def scenario():
        sup = Supervisor(settings(run_dir), on_event=lambda *e: events.append(e))
        await sup.open()
        try:
            await sup.start(spec.name, spec, ports)
            await sup.wait_for(
                spec.name,
                lambda us: by_name(us)["decode-0"]["state"] == "FATAL",
                60,
                "decode FATAL",
            )
            await sup.stop(spec.name, wait=20)
        finally:
            await sup.close()

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        try:
            asyncio.run(scenario())
        finally:
            kill_everything(all_pids(run_dir))
    [fatal] = [msg for _, kind, msg, _ in events if kind == "fatal"]
    assert "decode-0" in fatal and "gave up after 5 failures" in fatal
    assert f"port {taken} is held by pid {os.getpid()} (" in fatal
    assert "not starting a second copy" in fatal
    assert not (run_dir / spec.name / "decode-0" / "output.log").exists()  # never started


def test_our_instance_already_on_its_port_is_adopted_and_stopped_not_duplicated(tmp_path):
    """The decode runs, but the run dir has no record of it (a wiped or different run dir):
    the supervisor finds it on its port by its command line, adopts it instead of starting a
    second copy that could not bind, and its stop ends it."""
    run_dir = tmp_path / "run"
    spec = spec_with_free_ports()
    ports = allocate(spec)
    [decode] = [x for x in render(spec, ports, settings(run_dir).launch) if x.name == "decode-0"]
    orphan = subprocess.Popen(
        decode.argv,
        env=child_environment(os.environ, decode.env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,
    )
    events = []

    async def scenario():
        deadline = time.monotonic() + 60  # a loaded CI machine starts a stand-in slowly
        while procfs.listening_pids(decode.http_port) != {orphan.pid}:
            assert orphan.poll() is None and time.monotonic() < deadline, "the decode did not start"
            await asyncio.sleep(0.05)
        sup = Supervisor(settings(run_dir), on_event=lambda *e: events.append(e))
        await sup.open()
        try:
            await sup.start(spec.name, spec, ports)
            status = by_name(await sup.wait_running(spec.name, 30))
            assert status["decode-0"]["pid"] == orphan.pid
            assert not (run_dir / spec.name / "decode-0" / "output.log").exists()  # not spawned
            status, body = await tokens_through(f"http://127.0.0.1:{ports.proxy}")
            assert status == 200, body
            await sup.stop(spec.name, wait=20)
        finally:
            await sup.close()

    try:
        asyncio.run(scenario())
        assert orphan.wait(timeout=10) is not None  # the stop ended it
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(orphan.pid, signal.SIGKILL)
        orphan.wait()
        kill_everything(all_pids(run_dir))
    assert any(k == "adopted" and f"pid {orphan.pid}" in msg for _, k, msg, _ in events)
