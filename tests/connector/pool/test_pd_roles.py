"""The proxy follows instances that switch roles at runtime: it sends their role and epoch, and
a 409 (stale role/epoch) is re-routed after re-reading the role, never counted as a failure."""

import json
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from connector.pool import pd_roles
from connector.pool.instances import InstancePool
from connector.pool.policy import RoundRobin
from tests.connector.fakes import FakeEngine, completion, proxied, run


@dataclass
class SwitchingFake(FakeEngine):
    """A fake engine with newer vLLM's /v1/pd_role: generation needs the current headers."""

    role: str = "decode"
    epoch: int = 0
    phase: str = "ready"
    refused: int = 0
    role_reads: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        sent = (request.headers.get("X-vLLM-PD-Role"), request.headers.get("X-vLLM-PD-Epoch"))
        if self.phase != "ready" or sent != (self.role, str(self.epoch)):
            self.refused += 1
            return web.json_response({"error": "P/D admission rejected"}, status=409)
        return await super().handle(request)

    async def pd_role(self, request: web.Request) -> web.Response:
        self.role_reads += 1
        return web.json_response({"role": self.role, "epoch": self.epoch, "phase": self.phase})


async def start_switching(fake: SwitchingFake) -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", fake.handle)
    app.router.add_get("/v1/pd_role", fake.pd_role)
    app.router.add_get("/health", fake.health)
    fake._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await fake._runner.setup()
    site = web.TCPSite(fake._runner, "127.0.0.1", 0)
    await site.start()
    port = fake._runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"


async def post(base: str, body: dict) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(base + "/v1/completions", json=body) as r:
        return r.status, await r.read()


def test_a_409_is_rerouted_after_reading_the_role_and_ejects_nothing():
    async def body():
        p = SwitchingFake("p", role="prefill")
        d1, d2 = SwitchingFake("d1"), SwitchingFake("d2")
        for fake in (p, d1, d2):
            await start_switching(fake)
        try:
            async with proxied([p], [d1, d2], eject_after=1, retry_attempts=1) as (
                base,
                proxy,
            ):
                # the proxy starts without epochs: each instance's first 409 teaches it
                for _ in range(4):
                    status, raw = await post(base, completion(3))
                    assert status == 200, raw
                assert {i.url: i.pd_epoch for i in proxy.pool} == {p.url: 0, d1.url: 0, d2.url: 0}
                # d1 changes epoch behind the proxy's back (say, another router moved it)
                d1.epoch = 1
                before = (d1.refused, d1.role_reads)
                for _ in range(4):
                    status, raw = await post(base, completion(3))
                    assert status == 200, raw  # retry_attempts=1: the 409 retry is no retry
                assert d1.refused == before[0] + 1 and d1.role_reads == before[1] + 1
                inst = proxy.pool.get(d1.url)
                assert (inst.pd_epoch, inst.pd_fenced) == (1, False)
                for i in proxy.pool:  # nothing ejected, nothing counted failed
                    assert (i.ejections, i.failed, i.failed_in_a_row) == (0, 0, 0), i.describe()
                assert proxy.disaggregated.budget.spent == 0
                sent = [s for s in d1.seen if s.kind == "decode"][-1]
                assert sent.headers["X-vLLM-PD-Epoch"] == "1"
                assert sent.headers["X-vLLM-PD-Role"] == "decode"
        finally:
            for fake in (p, d1, d2):
                await fake.stop()

    run(body())


def test_409s_spend_none_of_a_requests_attempts():
    """A proxy that has not read its instances' roles yet learns them from 409s; those are
    routing events, so a real failure after them still gets its retry (the first request
    after a start had its attempts spent by 409s, and a refused decode then lost it)."""

    async def body():
        p1, p2 = SwitchingFake("p1", role="prefill"), SwitchingFake("p2", role="prefill")
        d = SwitchingFake("d", decode_statuses=[500])  # its first admitted decode fails
        for fake in (p1, p2, d):
            await start_switching(fake)
        try:
            async with proxied([p1, p2], [d], retry_attempts=2) as (base, proxy):
                status, raw = await post(base, completion(3))
                assert status == 200, raw
                entry = proxy.requests[-1]
                causes = [a["cause"] for a in entry["attempts"]]
                assert causes.count("stale_role") >= 2 and causes[-1] == "status", causes
                assert d.refused >= 1 and [s.kind for s in d.seen] == ["decode", "decode"]
        finally:
            for fake in (p1, p2, d):
                await fake.stop()

    run(body())


def test_an_instance_that_changed_role_moves_to_its_new_role_and_a_draining_one_is_fenced():
    async def body():
        p = SwitchingFake("p", role="prefill")
        d1, d2 = SwitchingFake("d1"), SwitchingFake("d2")
        for fake in (p, d1, d2):
            await start_switching(fake)
        try:
            async with proxied([p], [d1, d2]) as (base, proxy):
                for _ in range(3):
                    assert (await post(base, completion(2)))[0] == 200
                d2.role, d2.epoch = "prefill", 1  # d2 now prefills
                for _ in range(6):
                    status, raw = await post(base, completion(2))
                    assert status == 200, raw
                assert proxy.pool.get(d2.url).role == "prefill"
                assert any(s.kind == "prefill" for s in d2.seen)
                d1.phase = "draining"  # mid-change: 409 and fenced until it reads ready
                status, raw = await post(base, completion(2))
                # the only decode is fenced: the answer names it, and no instance is ejected
                assert status == 502 and b"409" in raw, raw
                assert proxy.pool.get(d1.url).pd_fenced
                d1.phase = "ready"
                await proxy.roles.refresh(proxy.pool.get(d1.url))
                assert (await post(base, completion(2)))[0] == 200
                assert all(i.ejections == 0 for i in proxy.pool)
        finally:
            for fake in (p, d1, d2):
                await fake.stop()

    run(body())


def test_role_answers_are_believed_only_when_well_formed():
    pool = InstancePool(RoundRobin())
    inst = pool.upsert("http://d", "decode", "read")
    pd_roles.apply(pool, inst, {"role": "decode", "epoch": 2, "phase": "ready"})
    assert pd_roles.headers(inst) == {"X-vLLM-PD-Role": "decode", "X-vLLM-PD-Epoch": "2"}
    pd_roles.fence(pool, inst)
    assert not inst.available
    pd_roles.apply(pool, inst, {"role": "both", "epoch": 3, "phase": "ready"})
    assert inst.pd_fenced and inst.pd_epoch == 2  # not an answer: it stays fenced
    pd_roles.apply(pool, inst, None)  # 404: it does not switch roles
    assert pd_roles.headers(inst) == {} and inst.available
    assert json.dumps(inst.describe())  # the admin API's listing shows the new fields
