"""The supervisor shell on fake processes, probes and clock: `poll()` is driven by the test."""

import asyncio
import json
import signal
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from controller.backends.local import PortHolder, ProcessRecord, ShimBackend
from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, render
from controller.spec.deployment import Mode
from controller.supervise.machine import Policy
from controller.supervise.supervisor import Supervisor, SupervisorError, SupervisorSettings
from controller.switch.plan import with_modes
from tests.controller.factories import kept_ports, mori_blog, tiny_pair
from tests.controller.fakes import FakeBackend, FakeClock, FakeProbe

POLICY = Policy(
    backoff_base=1.0,
    backoff_cap=8.0,
    max_failed_starts=3,
    start_timeout=30.0,
    drain_timeout=5.0,
    term_timeout=2.0,
    kill_timeout=2.0,
)


class Harness:
    def __init__(self, tmp_path, backend=None, probe=None, clock=None):
        self.backend = backend or FakeBackend()
        self.probe = probe or FakeProbe()
        self.clock = clock or FakeClock()
        self.events = []
        self.settings = SupervisorSettings(
            run_dir=tmp_path / "run",
            policy=POLICY,
            launch=LaunchSettings(pdctl_command=("pdctl",)),
            poll_interval=0.1,
            health_interval=0.5,
        )
        self.sup = self.new()

    def new(self):
        return Supervisor(
            self.settings,
            self.backend,
            self.probe,
            self.clock,
            on_event=lambda *e: self.events.append(e),
        )

    async def polls(self, n=1, every=0.5):
        for _ in range(n):
            self.clock.advance(every)
            await self.sup.poll()

    def states(self, name):
        return {u["name"]: u["state"] for u in self.sup.status(name)}


def run(coro):
    return asyncio.run(coro)


def test_proxy_first_then_instances_then_running(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        assert [s[0] for s in h.backend.spawned] == ["proxy"]
        await h.polls()  # proxy healthy -> RUNNING -> instances start
        assert [s[0] for s in h.backend.spawned] == ["proxy", "prefill-0", "decode-0"]
        await h.polls()
        assert set(h.states("tiny-pd").values()) == {"RUNNING"}
        # Starting again with the same spec changes nothing: no duplicates.
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        assert len(h.backend.spawned) == 3
        assert ("supervisor", "ready", "tiny-pd/decode-0: ready after 0.5 s", "tiny-pd") in h.events

    run(scenario())


def test_the_supervisor_keeps_each_spawned_instance_s_start_time_by_group(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        assert h.sup.start_times("tiny-pd") == {"prefill": [0.5], "decode": [0.5]}
        await h.sup.restart("tiny-pd", "decode-0")
        await h.polls(4)
        assert h.states("tiny-pd")["decode-0"] == "RUNNING"
        times = h.sup.start_times("tiny-pd")
        assert times["prefill"] == [0.5] and len(times["decode"]) == 2

    run(scenario())


def test_moriio_instances_are_ready_only_once_registered(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair("mori", "MoRIIOConnector")
        ports = allocate(spec)
        await h.sup.start("mori", spec, ports)
        await h.polls(3)
        status = {u["name"]: u for u in h.sup.status("mori")}
        assert status["decode-0"]["state"] == "STARTING"
        assert status["decode-0"]["health"] is False and status["decode-0"]["registration"] is False
        h.probe.registered |= {ports.instances["prefill-0"].http, ports.instances["decode-0"].http}
        await h.polls(1)
        status = {u["name"]: u for u in h.sup.status("mori")}
        assert status["decode-0"]["state"] == "RUNNING" and status["decode-0"]["registration"]
        assert status["decode-0"]["mode"] == "read"

    run(scenario())


def test_a_crashed_instance_comes_back_after_backoff(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        first = h.backend.pid("decode-0")
        h.backend.crash("decode-0", -9)
        await h.polls(1, every=0.1)
        decode = next(u for u in h.sup.status("tiny-pd") if u["name"] == "decode-0")
        assert decode["state"] == "BACKOFF" and decode["last_exit_code"] == -9
        assert (ports.instances["decode-0"].http, True) in h.probe.drains
        await h.polls(1, every=1.0)  # the 1 s backoff elapsed: respawned
        await h.polls(1)
        decode = next(u for u in h.sup.status("tiny-pd") if u["name"] == "decode-0")
        assert decode["state"] == "RUNNING" and decode["restarts"] == 1
        assert decode["pid"] != first and decode["failures"] == 0
        assert h.probe.drains[-1] == (ports.instances["decode-0"].http, False)  # undrained

    run(scenario())


def test_an_instance_that_keeps_failing_goes_fatal(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        h.probe.down.add(ports.instances["decode-0"].http)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(1)
        for _ in range(3):
            h.backend.crash("decode-0", 1)
            await h.polls(1, every=0.1)
            await h.polls(1, every=8.0)
        assert h.states("tiny-pd")["decode-0"] == "FATAL"
        assert sum(1 for s in h.backend.spawned if s[0] == "decode-0") == 3
        assert h.events[-1][1] == "fatal"
        # Each failure quotes what the process said last, so the event log says why.
        failures = [msg for _, kind, msg, _ in h.events if kind in ("backoff", "fatal")]
        assert len(failures) == 3
        assert all(m.endswith('its last log line: "decode-0 line 4"') for m in failures)
        # Waiting for it says why, in the failed unit's own log lines, and only in its.
        with pytest.raises(TimeoutError) as err:
            await h.sup.wait_running("tiny-pd", 0)
        assert "decode-0 (FATAL), last log lines:\ndecode-0 line 0" in str(err.value)
        assert "decode-0 line 7" in str(err.value) and "proxy line" not in str(err.value)
        await h.polls(3, every=10.0)
        assert sum(1 for s in h.backend.spawned if s[0] == "decode-0") == 3

    run(scenario())


def test_stop_drains_terms_then_kills_instances_before_the_proxy(tmp_path):
    async def scenario():
        h = Harness(tmp_path, backend=FakeBackend(obey_term=False))
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        decode_port = ports.instances["decode-0"].http
        h.probe.outstanding[decode_port] = 2  # in flight: the drain waits
        await h.sup.stop("tiny-pd")
        await h.polls(1, every=0.1)
        assert h.states("tiny-pd")["decode-0"] == "STOPPING"
        assert ("prefill-0", signal.SIGTERM) in h.backend.signals
        assert ("decode-0", signal.SIGTERM) not in h.backend.signals
        h.probe.outstanding[decode_port] = 0
        await h.polls(1, every=0.1)
        assert ("decode-0", signal.SIGTERM) in h.backend.signals
        await h.polls(12)  # 2 s after SIGTERM: SIGKILL; then the proxy, the same way
        assert set(h.states("tiny-pd").values()) == {"STOPPED"}
        names = [n for n, _ in h.backend.signals]
        assert names.index("proxy") > max(names.index("prefill-0"), names.index("decode-0"))
        assert ("decode-0", signal.SIGKILL) in h.backend.signals  # ignored SIGTERM
        assert (decode_port, True) in h.probe.drains

    run(scenario())


def test_a_new_supervisor_adopts_live_processes_and_replaces_dead_ones(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        await h.sup.restart("tiny-pd", "prefill-0")
        await h.polls(2)
        pids = {u["name"]: u["pid"] for u in h.sup.status("tiny-pd")}
        # The supervisor "crashes" (is dropped); meanwhile the decode dies.
        h.backend.crash("decode-0", -9)
        spawned = len(h.backend.spawned)
        h.sup = h.new()
        status = {u["name"]: u for u in h.sup.status("tiny-pd")}
        assert status["proxy"]["pid"] == pids["proxy"]
        assert status["prefill-0"]["pid"] == pids["prefill-0"]
        assert status["prefill-0"]["state"] == "STARTING" and status["prefill-0"]["restarts"] == 1
        assert status["decode-0"]["state"] == "EXITED"
        assert status["decode-0"]["last_exit_code"] == -9
        await h.polls(2)
        status = {u["name"]: u for u in h.sup.status("tiny-pd")}
        assert {u["state"] for u in status.values()} == {"RUNNING"}
        assert [s[0] for s in h.backend.spawned[spawned:]] == ["decode-0"]  # only the dead one
        assert status["prefill-0"]["pid"] == pids["prefill-0"]
        kinds = [k for _, k, _, _ in h.events]
        assert kinds.count("adopted") == 2 and "exited" in kinds

    run(scenario())


def test_a_stopped_deployment_stays_stopped_across_supervisors(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        await h.sup.stop("tiny-pd")
        await h.polls(3)
        assert set(h.states("tiny-pd").values()) == {"STOPPED"}
        h.sup = h.new()
        await h.polls(3)
        assert set(h.states("tiny-pd").values()) == {"STOPPED"}

    run(scenario())


def test_facade_errors_preview_and_log_tail(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = mori_blog()
        ports = allocate(spec)
        shown = h.sup.preview(spec, ports)
        assert shown["decode-0"]["command"].startswith("vllm serve Qwen/Qwen3-235B-A22B-FP8")
        with pytest.raises(SupervisorError, match="no deployment"):
            h.sup.status("nope")
        await h.sup.start("mori-blog", spec, ports)
        assert h.sup.log_tail("mori-blog", "proxy", 2) == ["proxy line 0", "proxy line 1"]
        with pytest.raises(SupervisorError, match="no instance 'x'"):
            h.sup.log_tail("mori-blog", "x", 2)
        proxy = h.sup.status("mori-blog")[0]
        assert proxy["role"] == "proxy" and proxy["ports"] == {"http": 10001, "registry": 36367}

    run(scenario())


def test_a_changed_spec_restarts_only_the_changed_processes(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        changed = spec.model_copy(
            update={
                "groups": [
                    spec.groups[0],
                    spec.groups[1].model_copy(update={"extra_args": ["--seed", "7"]}),
                ]
            }
        )
        await h.sup.start("tiny-pd", changed, ports)
        await h.polls(3)
        assert [s[0] for s in h.backend.spawned[3:]] == ["decode-0"]
        assert "--seed" in h.backend.spawned[-1][1]

    run(scenario())


def test_shim_backend_takes_for_ours_only_the_pid_start_time_and_command_it_recorded(tmp_path):
    fake = tmp_path / "proc"
    (fake / "4242").mkdir(parents=True)
    (fake / "4242" / "stat").write_text("4242 (vllm) S " + "1 " * 18 + "999 0\n")
    # A script's argv as the kernel shows it: the interpreter, the script's full path, its args.
    argv = ("vllm", "serve", "m", "-tp", "1")
    shown = ("/venv/bin/python", "/venv/bin/vllm", *argv[1:])
    (fake / "4242" / "cmdline").write_bytes("".join(f"{a}\0" for a in shown).encode())
    backend = ShimBackend(proc=fake)
    ours = ProcessRecord("decode-0", 4242, child_start_time=999, argv=argv)
    recycled = replace(ours, child_start_time=123)
    stranger = replace(ours, argv=("vllm", "serve", "m", "-tp", "2"))  # same pid and start
    assert backend.running(ours)
    assert not backend.running(recycled) and not backend.running(stranger)
    for record in (recycled, stranger):
        backend.signal(record, signal.SIGKILL)  # must not signal a stranger (nothing happens)

    # The child is gone; a live shim of this instance is still about to record its exit.
    (fake / "4343").mkdir()
    (fake / "4343" / "stat").write_text("4343 (python) S " + "1 " * 18 + "555 0\n")
    shim = ("python", "pdctl.py", "run-instance", "--name", "decode-0", "--", *argv)
    (fake / "4343" / "cmdline").write_bytes("".join(f"{a}\0" for a in shim).encode())
    gone = replace(recycled, shim_pid=4343, shim_start_time=555)
    assert backend.running(gone)
    assert not backend.running(replace(gone, name="prefill-0"))  # not its shim


def test_a_proxy_that_is_down_does_not_get_running_instances_replaced(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair("mori", "MoRIIOConnector")
        ports = allocate(spec)
        h.probe.registered |= {ports.instances["prefill-0"].http, ports.instances["decode-0"].http}
        await h.sup.start("mori", spec, ports)
        await h.polls(3)
        assert set(h.states("mori").values()) == {"RUNNING"}
        h.probe.proxy_up = False  # restarting: no registrations to read
        await h.polls(10)
        status = {u["name"]: u for u in h.sup.status("mori")}
        assert status["decode-0"]["state"] == "RUNNING"
        assert status["decode-0"]["registration"] is None  # unknown while the proxy is down
        assert len(h.backend.spawned) == 3
        h.probe.proxy_up = True
        h.probe.registered.discard(ports.instances["decode-0"].http)  # it never came back
        await h.polls(4)
        assert h.states("mori")["decode-0"] != "RUNNING"

    run(scenario())


def test_log_tails_and_failure_events_are_shown_with_secrets_masked(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        h.backend.log_tail = lambda run_dir, name, lines: [
            "loading",
            f"{name}: bad --hf-token hf_live_secret for HF_TOKEN=hf_live_secret",
            "",
        ]
        spec = tiny_pair()
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        h.backend.crash("decode-0", 1)
        await h.polls(1, every=0.1)
        shown = h.sup.log_tail("tiny-pd", "decode-0", 3)
        assert shown[1] == "decode-0: bad --hf-token *** for HF_TOKEN=***"
        [exited] = [
            msg
            for _, kind, msg, _ in h.events
            if kind in ("exited", "backoff") and "decode-0" in msg
        ][:1]
        assert 'its last log line: "decode-0: bad --hf-token *** for HF_TOKEN=***"' in exited
        assert all("hf_live_secret" not in msg for _, _, msg, _ in h.events)

    run(scenario())


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_each_proxy_gets_its_own_admin_token_in_its_environment_only(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair("mori", "MoRIIOConnector")
        ports = allocate(spec)
        h.probe.registered |= {ports.instances["prefill-0"].http, ports.instances["decode-0"].http}
        await h.sup.start("mori", spec, ports)
        await h.polls(3)
        [(_, argv, env)] = [s for s in h.backend.spawned if s[0] == "proxy"]
        token = env["PDCTL_ADMIN_TOKEN"]
        assert len(token) >= 32 and token not in " ".join(argv)
        assert h.sup.admin_token("mori") == token
        assert set(h.probe.tokens) == {token}  # the supervisor's own admin calls use it
        folder = h.settings.run_dir / "mori"
        assert (folder / "proxy-admin-token").read_text() == token
        assert mode(folder / "proxy-admin-token") == 0o600
        shown = json.dumps([h.sup.status("mori"), h.sup.preview(spec, ports), h.events])
        assert token not in shown
        assert all("PDCTL_ADMIN_TOKEN" not in e for n, _, e in h.backend.spawned if n != "proxy")

        # A new supervisor adopts the running proxy and can still call its admin API.
        h.sup = h.new()
        h.probe.tokens.clear()
        await h.polls(2)
        assert h.sup.admin_token("mori") == token and set(h.probe.tokens) == {token}

        # A restarted proxy is a new proxy: a new token.
        await h.sup.restart("mori", "proxy")
        await h.polls(12)
        [*_, (_, _, env)] = [s for s in h.backend.spawned if s[0] == "proxy"]
        assert env["PDCTL_ADMIN_TOKEN"] != token
        assert h.sup.admin_token("mori") == env["PDCTL_ADMIN_TOKEN"]

    run(scenario())


def test_a_port_held_by_another_process_is_never_started_twice_nor_running(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        taken = ports.instances["decode-0"].http
        h.backend.held[taken] = [PortHolder(4321, 77, ("nc", "-l", str(taken)))]
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(40)  # the orphan answers /health on that port: the probe says healthy
        assert "decode-0" not in [s[0] for s in h.backend.spawned]
        status = {u["name"]: u for u in h.sup.status("tiny-pd")}
        assert status["decode-0"]["state"] == "FATAL" and status["decode-0"]["pid"] is None
        held = [msg for _, kind, msg, _ in h.events if kind == "port_held"]
        assert len(held) == POLICY.max_failed_starts
        assert f"port {taken} is held by pid 4321 (nc -l {taken})" in held[0]
        [fatal] = [msg for _, kind, msg, _ in h.events if kind == "fatal"]
        assert f"port {taken} is held by pid 4321" in fatal
        assert h.backend.signals == []  # the holder is not ours to signal

    run(scenario())


def test_our_own_instance_found_on_its_port_is_adopted_not_started_twice(tmp_path):
    """Its state file is gone (say, a crash mid-write), but the process on the port is the
    very command this launch runs: it is adopted."""

    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        [decode] = [x for x in render(spec, ports, h.settings.launch) if x.name == "decode-0"]
        argv = ["/venv/bin/python", *decode.argv]  # as /proc shows a script's argv
        h.backend.held[ports.instances["decode-0"].http] = [PortHolder(4321, 77, tuple(argv))]
        h.backend.running = lambda record: (
            record.child_pid == 4321 or FakeBackend.running(h.backend, record)
        )
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(3)
        assert "decode-0" not in [s[0] for s in h.backend.spawned]
        status = {u["name"]: u for u in h.sup.status("tiny-pd")}
        assert status["decode-0"]["state"] == "RUNNING" and status["decode-0"]["pid"] == 4321
        assert any(k == "adopted" and "pid 4321" in msg for _, k, msg, _ in h.events)

    run(scenario())


def test_a_relative_run_dir_is_made_absolute_once_at_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = SupervisorSettings(run_dir=Path("runs"))
    monkeypatch.chdir("/")
    assert settings.run_dir == tmp_path / "runs"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert SupervisorSettings(run_dir=Path("~/pdctl")).run_dir == tmp_path / "pdctl"


def test_run_state_files_are_0600_in_0700_directories(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair(env={"HF_TOKEN": "hf_secret"})
        await h.sup.start("tiny-pd", spec, allocate(spec))
        await h.polls(2)
        await h.sup.restart("tiny-pd", "decode-0")
        await h.polls(6)
        run_dir = h.settings.run_dir
        folder = run_dir / "tiny-pd"
        assert mode(run_dir) == mode(folder) == mode(folder / "decode-0") == 0o700
        for path in (
            folder / "deployment.json",
            folder / "proxy-admin-token",
            folder / "decode-0" / "restarts",
        ):
            assert mode(path) == 0o600, path
        await h.sup.stop("tiny-pd")
        assert mode(folder / "deployment.json") == 0o600

    run(scenario())


def test_registrations_the_proxy_refused_become_events_once_then_at_most_a_minute_apart(
    tmp_path,
):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair("mori", "MoRIIOConnector")
        ports = allocate(spec)
        await h.sup.start("mori", spec, ports)
        h.probe.registered |= {ports.instances["prefill-0"].http, ports.instances["decode-0"].http}
        await h.polls(3)
        rogue = {
            "url": "http://127.0.0.1:9",
            "reason": "unexpected",
            "field": "http_address",
            "message": "http://127.0.0.1:9 is not an instance this deployment launched",
            "count": 1,
        }
        h.probe.refusals.append(rogue)
        await h.polls(4)
        told = [e for e in h.events if e[1] == "registry.refused"]
        assert len(told) == 1
        assert "127.0.0.1:9" in told[0][2] and "'http_address'" in told[0][2]
        rogue["count"] = 40  # it keeps trying: told again only after a minute
        await h.polls(10)
        assert len([e for e in h.events if e[1] == "registry.refused"]) == 1
        await h.polls(120)
        told = [e for e in h.events if e[1] == "registry.refused"]
        assert len(told) == 2 and "(40 times so far)" in told[1][2]

    run(scenario())


def test_a_moriio_proxy_is_handed_the_registrations_it_launched_without_a_restart_on_change(
    tmp_path,
):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair("mori", "MoRIIOConnector")
        ports = allocate(spec)
        await h.sup.start("mori", spec, ports)
        (proxy_spawn,) = [s for s in h.backend.spawned if s[0] == "proxy"]
        expected = json.loads(proxy_spawn[2]["PDCTL_REGISTRY_EXPECTED"])
        assert {(e["role"], tuple(e["modes"])) for e in expected} == {
            ("prefill", ("read",)),
            ("decode", ("read",)),
        }
        assert {e["url"] for e in expected} == {
            f"http://127.0.0.1:{ports.instances[n].http}" for n in ("prefill-0", "decode-0")
        }
        # another mode for every group: the instances restart, the proxy does not
        switched = with_modes(spec, {g.name for g in spec.groups}, Mode.WRITE)
        await h.sup.start("mori", switched, ports)
        await h.polls(2)
        assert [s[0] for s in h.backend.spawned].count("proxy") == 1

    run(scenario())


async def _restarting_prefill(h, ports):
    """The prefill crashed and starts again, not yet answering (it stays STARTING)."""
    h.probe.down.add(ports.instances["prefill-0"].http)
    h.backend.crash("prefill-0", -9)
    await h.polls(1, every=0.1)
    await h.polls(1, every=1.0)  # the 1 s backoff: respawned
    assert h.states("tiny-pd")["prefill-0"] == "STARTING"


def _unhealthy(h) -> list[str]:
    return [msg for _, kind, msg, _ in h.events if "unhealthy" in msg]


def test_a_running_instance_silent_while_a_neighbour_starts_is_not_replaced(tmp_path):
    """Loading a model starves the host's cores: a running decode's /health may time out
    then. Its silence is not counted while the prefill starts; once it is up, it is."""

    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        await _restarting_prefill(h, ports)
        h.probe.silent.add(ports.instances["decode-0"].http)
        await h.polls(12)  # 12 silent probes of the decode, 4 times the limit
        assert h.states("tiny-pd") == {
            "proxy": "RUNNING",
            "prefill-0": "STARTING",
            "decode-0": "RUNNING",
        }
        assert _unhealthy(h) == []
        h.probe.down.discard(ports.instances["prefill-0"].http)
        await h.polls(1)
        assert h.states("tiny-pd")["prefill-0"] == "RUNNING"
        await h.polls(3)  # no neighbour starts: three silent probes replace it
        assert [m for m in _unhealthy(h) if "decode-0" in m], h.events[-3:]

    run(scenario())


def test_a_running_instance_that_refuses_while_a_neighbour_starts_is_replaced(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        await _restarting_prefill(h, ports)
        h.probe.down.add(ports.instances["decode-0"].http)  # refused: not starvation
        await h.polls(3)
        assert [m for m in _unhealthy(h) if "decode-0" in m], h.events[-3:]

    run(scenario())


def test_an_exit_the_shim_writes_down_just_after_the_read_still_carries_its_code(tmp_path):
    # The state file was read while the shim was still writing the exit code (and then went):
    # the code must not be lost as "unknown" (a fresh-clone CI run saw last_exit_code None).
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        h.backend.crash("decode-0", -9, stale_reads=1)
        await h.polls(1, every=0.1)
        decode = next(u for u in h.sup.status("tiny-pd") if u["name"] == "decode-0")
        assert decode["state"] == "BACKOFF" and decode["last_exit_code"] == -9

    run(scenario())


class SlowSpawns(FakeBackend):
    """The first spawn of `slow` waits until `release` is set, as a shim that takes a while."""

    def __init__(self, slow: str) -> None:
        super().__init__()
        self.slow, self.entered, self.release = slow, asyncio.Event(), asyncio.Event()

    async def spawn(self, run_dir, name, argv, env, where=None):
        if name == self.slow and not self.entered.is_set():
            self.entered.set()
            await self.release.wait()
        return await super().spawn(run_dir, name, argv, env, where)


def test_a_change_while_the_instance_is_being_spawned_leaves_one_process_of_it(tmp_path):
    # Found by the model-based test (tests/model/, seed 3): a rollback changed an instance back
    # while the aborted rollout's spawn of it was in flight; a second copy was spawned at once,
    # the first kept the ports, and the instance went FATAL on them, the first running on.
    async def scenario():
        h = Harness(tmp_path, backend=SlowSpawns("decode-0"))
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        polling = asyncio.create_task(h.polls(2))  # decode-0's spawn waits in there
        await h.backend.entered.wait()
        changed = spec.model_copy(
            update={
                "groups": [
                    spec.groups[0],
                    spec.groups[1].model_copy(update={"extra_args": ["--seed", "7"]}),
                ]
            }
        )
        await h.sup.start("tiny-pd", changed, ports)  # a restart of decode-0, mid-spawn
        h.backend.release.set()
        await polling
        await h.polls(4)
        decodes = [argv for name, argv, _ in h.backend.spawned if name == "decode-0"]
        assert len(decodes) == 2 and "--seed" in decodes[-1]  # the first, then the change
        assert ("decode-0", signal.SIGTERM) in h.backend.signals  # the first one stopped
        alive = [p for (_, n), p in h.backend.procs.items() if n == "decode-0" and p["alive"]]
        assert len(alive) == 1 and "--seed" in alive[0]["record"].argv
        assert h.states("tiny-pd")["decode-0"] == "RUNNING"

    run(scenario())


def test_a_caller_cancelled_mid_spawn_leaves_the_process_known_and_stoppable(tmp_path):
    # Found by the model-based test (tests/model/, seed 4): a hold rollout aborted during its
    # apply step was cancelled while the supervisor spawned prefill-a-0; the process started,
    # its machine never learnt its pid ("pid None did not exit after SIGKILL": FATAL), and it
    # ran on, shown by no status, after the deployment and `pdctl serve` had stopped.
    async def scenario():
        h = Harness(tmp_path, backend=SlowSpawns("decode-1"))
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        more = spec.model_copy(
            update={"groups": [spec.groups[0], spec.groups[1].model_copy(update={"count": 2})]}
        )
        wider = kept_ports(spec, ports, more)
        caller = asyncio.create_task(h.sup.start("tiny-pd", more, wider, only={"decode-1"}))
        await h.backend.entered.wait()  # decode-1's spawn in flight, in the caller's task
        caller.cancel()
        await asyncio.sleep(0.01)
        assert not caller.done()  # the cancel lands once the spawn it cut is done
        h.backend.release.set()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await h.polls(3)
        decode = next(u for u in h.sup.status("tiny-pd") if u["name"] == "decode-1")
        assert decode["state"] == "RUNNING" and decode["pid"] == h.backend.pid("decode-1")
        await h.sup.stop("tiny-pd")
        await h.polls(10)
        assert not [p for p in h.backend.procs.values() if p["alive"]]
        assert set(h.states("tiny-pd").values()) == {"STOPPED"}

    run(scenario())


def test_an_instance_dropped_while_another_is_spawned_is_never_started(tmp_path):
    # Found by the model-based test (tests/model/, seed 4): a hold rollout that added four
    # instances was aborted while one of them spawned; its rollback forgot the others, but the
    # pass that was starting them went on down its list and started two of them: processes
    # no status showed and whose registrations the proxy refused, left running.
    async def scenario():
        h = Harness(tmp_path, backend=SlowSpawns("decode-1"))
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        more = spec.model_copy(
            update={"groups": [spec.groups[0], spec.groups[1].model_copy(update={"count": 3})]}
        )
        new = {"decode-1", "decode-2"}
        adding = asyncio.create_task(
            h.sup.start("tiny-pd", more, kept_ports(spec, ports, more), only=new)
        )
        await h.backend.entered.wait()  # decode-1's spawn in flight; decode-2 is next
        await h.sup.start("tiny-pd", spec, ports, only=new)  # back: both dropped
        h.backend.release.set()
        await adding
        await h.polls(10)
        assert [n for n, _, _ in h.backend.spawned if n == "decode-2"] == []
        alive = {n for (_, n), p in h.backend.procs.items() if p["alive"]}
        assert alive == {"proxy", "prefill-0", "decode-0"}
        assert set(h.states("tiny-pd")) == {"proxy", "prefill-0", "decode-0"}

    run(scenario())
