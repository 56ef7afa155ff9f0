"""The supervisor shell on fake processes, probes and clock: `poll()` is driven by the test."""

import asyncio
import signal

import pytest

from controller.machine import Policy
from controller.ports import allocate
from controller.process_backend import ProcessRecord, ShimBackend
from controller.render import LaunchSettings
from controller.supervisor import Supervisor, SupervisorError, SupervisorSettings
from tests.controller.factories import mori_blog, tiny_pair
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


def test_shim_backend_does_not_take_a_recycled_pid_for_ours(tmp_path):
    fake = tmp_path / "proc"
    (fake / "4242").mkdir(parents=True)
    (fake / "4242" / "stat").write_text("4242 (vllm) S " + "1 " * 18 + "999 0\n")
    backend = ShimBackend(proc=fake)
    ours = ProcessRecord("decode-0", 4242, child_start_time=999)
    recycled = ProcessRecord("decode-0", 4242, child_start_time=123)
    assert backend.running(ours) and not backend.running(recycled)
    backend.signal(recycled, signal.SIGKILL)  # must not signal a stranger (nothing happens)


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
