"""What the supervisor tells the proxy is told whole: an instance that is ready again is
undrained even if the proxy could not be told at that moment, and a restart cut short by its
caller (a rollout aborted mid-step) still stops the process it drained."""

from __future__ import annotations

import asyncio

from controller.launch.ports import allocate
from tests.controller.factories import tiny_pair
from tests.controller.fakes import FakeProbe
from tests.controller.supervise.test_supervisor import Harness, run


class FlakyProbe(FakeProbe):
    """A proxy that cannot be told `failing` more times; `hold` set: a drain reaches the
    proxy, then its answer never comes until `answer` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = 0
        self.hold = False
        self.reached = asyncio.Event()
        self.answer = asyncio.Event()

    async def set_draining(self, proxy_url, token, instance_url, draining) -> bool:
        if self.failing:
            self.failing -= 1
            return False
        told = await super().set_draining(proxy_url, token, instance_url, draining)
        if self.hold and draining:
            self.reached.set()
            await self.answer.wait()
        return told


def test_an_undrain_the_proxy_did_not_take_is_told_again_until_it_is(tmp_path):
    async def scenario():
        h = Harness(tmp_path, probe=FlakyProbe())
        spec = tiny_pair()
        ports = allocate(spec)
        decode = ports.instances["decode-0"].http
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        h.backend.crash("decode-0", -9)
        await h.polls(1, every=0.1)
        await h.polls(1, every=1.0)  # the backoff elapsed: respawned
        h.probe.failing = 3  # the proxy does not answer the undrain, nor two tries after
        await h.polls(1)  # ready: told, and told again in the same pass
        assert h.states("tiny-pd")["decode-0"] == "RUNNING"
        assert h.probe.drains[-1] == (decode, True) and h.probe.failing == 1
        await h.polls(1)
        assert h.probe.drains[-1] == (decode, True) and h.probe.failing == 0
        await h.polls(1)
        assert h.probe.drains[-1] == (decode, False)  # told at last
        undrains = len(h.probe.drains)
        await h.polls(3)
        assert len(h.probe.drains) == undrains  # and only once it was

    run(scenario())


def test_an_instance_ready_before_an_adopted_proxy_answers_is_undrained_once_it_does(tmp_path):
    """After a restart of `pdctl serve`, the proxy it adopts keeps the drains it had."""

    async def scenario():
        h = Harness(tmp_path, probe=FlakyProbe())
        spec = tiny_pair()
        ports = allocate(spec)
        decode, proxy = ports.instances["decode-0"].http, ports.proxy
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        h.probe.down.add(decode)
        h.backend.crash("decode-0", -9)  # drained at the proxy, then restarted
        await h.polls(3, every=1.0)
        assert h.probe.drains[-1] == (decode, True)
        h.sup = h.new()  # the control plane restarts; the proxy runs on, drains and all
        await h.sup.open()
        h.probe.down.add(proxy)  # busy: it does not answer its first health checks
        h.probe.down.discard(decode)
        await h.polls(2)
        assert h.states("tiny-pd")["proxy"] == "STARTING"
        assert h.states("tiny-pd")["decode-0"] == "RUNNING"
        h.probe.down.discard(proxy)
        await h.polls(2)
        assert h.states("tiny-pd")["proxy"] == "RUNNING"
        assert h.probe.drains[-1] == (decode, False)

    run(scenario())


def test_a_restart_whose_caller_is_cancelled_mid_drain_still_stops_the_process(tmp_path):
    async def scenario():
        h = Harness(tmp_path, probe=FlakyProbe())
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        first = h.backend.pid("decode-0")
        h.probe.hold = True
        caller = asyncio.create_task(h.sup.restart("tiny-pd", "decode-0"))
        await h.probe.reached.wait()  # the drain reached the proxy; its answer has not come
        caller.cancel()  # the rollout that asked is aborted
        await asyncio.sleep(0.01)
        assert not caller.done()  # it waits for the restart it asked for to be under way
        h.probe.answer.set()
        await asyncio.gather(caller, return_exceptions=True)
        assert caller.cancelled()  # then the abort goes through
        assert any(e[1] == "stopping" and "decode-0" in e[2] for e in h.events), h.events
        for _ in range(40):
            await h.polls(1, every=0.5)
            if h.states("tiny-pd")["decode-0"] == "RUNNING" and h.backend.pid("decode-0") != first:
                break
        assert h.backend.pid("decode-0") != first  # the restart happened all the same
        assert h.states("tiny-pd")["decode-0"] == "RUNNING"
        assert h.probe.drains[-1] == (ports.instances["decode-0"].http, False)

    run(scenario())


def test_a_change_cut_short_is_done_before_its_caller_hears_of_the_cut(tmp_path):
    """What the caller does next (an abort's rollback converging back) must find the change
    it cut short done, never still going on beside it."""

    async def scenario():
        h = Harness(tmp_path, probe=FlakyProbe())
        two = tiny_pair(
            groups=[
                {"name": "prefill", "role": "prefill"},
                {"name": "decode", "role": "decode", "count": 2},
            ]
        )
        ports = allocate(two)
        await h.sup.start("tiny-pd", two, ports, revision=1)
        await h.polls(3)
        seeded = two.model_copy(deep=True)
        seeded.groups[1].extra_args = ["--seed", "7"]
        h.probe.hold = True
        caller = asyncio.create_task(h.sup.start("tiny-pd", seeded, ports, revision=2))
        await h.probe.reached.wait()  # the first decode's drain is on its way
        caller.cancel()
        await asyncio.sleep(0.01)
        assert not caller.done()  # the cut waits for the change to be under way
        h.probe.answer.set()
        await asyncio.gather(caller, return_exceptions=True)
        assert caller.cancelled()
        stopping = {e[2].split(":")[0] for e in h.events if e[1] == "stopping"}
        assert stopping == {"tiny-pd/decode-0", "tiny-pd/decode-1"}, h.events

    run(scenario())
