"""Nothing a stand-in keeps per request outlives the request: after N requests through a real
in-process MoRIIO pair (both servers on loopback sockets, driven as the proxy drives them),
every map keyed by request or transfer id is empty, on every terminal path (answered,
aborted by the client, KV transfer failed, KV hold expired, a decode announced to nobody).
Counts of entries, not timings: a leak of one entry per request fails at once."""

from __future__ import annotations

import asyncio
import tracemalloc
import uuid
from contextlib import asynccontextmanager
from dataclasses import replace

import aiohttp
from aiohttp import web

from connector.legs import rewrite as legs
from harness.processes import free_port
from simulator.config.engine import EngineSettings, KVTransferSettings
from simulator.engine.block_pool import BlockPool
from simulator.kv.wire import read_frame, send_frame
from simulator.server.app import create_app
from simulator.server.state import STATE, SimState

PROMPT = list(range(100, 164))  # 64 tokens: four blocks


def engine(role: str, read_mode: bool, **kv: object) -> EngineSettings:
    transfer = KVTransferSettings(
        connector="MoRIIOConnector",
        role=role,
        read_mode=read_mode,
        kv_port=free_port(),
        notify_port=free_port(),
        **kv,
    )
    return EngineSettings(
        port=free_port(), kv=transfer, enable_prefix_caching=False, log_stats_interval_s=None
    )


def zmq(s: EngineSettings) -> str:
    return f"host:127.0.0.1,handshake:{s.kv.kv_port},notify:{s.kv.notify_port}"


@asynccontextmanager
async def serving(*settings: EngineSettings):
    runners = []
    try:
        for s in settings:
            runner = web.AppRunner(create_app(s))
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", s.port).start()
            runners.append(runner)
        async with aiohttp.ClientSession() as session:
            yield session, [r.app[STATE] for r in runners]
    finally:
        for runner in runners:
            await runner.cleanup()


def kept(state: SimState) -> dict[str, int]:
    """Every per-request structure of one stand-in, by how many entries it holds."""
    engine, agent = state.engine, state.agent
    counts = {
        "scheduler.requests": len(engine.scheduler.requests),
        "scheduler.held": len(engine.scheduler.held),
        "scheduler.awaiting_kv": len(engine.scheduler.awaiting_kv),
        "engine queues": len(engine._queues),
        "metrics last token": len(state.metrics._last_token),
    }
    if agent is not None:
        counts |= {
            "agent held": len(agent._held),
            "agent targets": len(agent._targets),
            "agent pushes": len(agent._pushes),
            "agent remote": len(agent._remote),
            "agent failures": len(agent.failures),
        }
    return {k: v for k, v in counts.items() if v}


async def settle(*states: SimState, limit: float = 5.0) -> None:
    """Until every stand-in keeps nothing (KV acks and pushes end after the answer)."""
    deadline = asyncio.get_running_loop().time() + limit
    while any(kept(s) for s in states) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)


async def pd_request(session, prefill: EngineSettings, decode: EngineSettings, read: bool) -> int:
    """One request the way `pdctl proxy` sends it (connector/legs/rewrite.py); the decode's
    status."""
    h = legs.Handoff(
        "moriio",
        "read" if read else "write",
        uuid.uuid4().hex,
        legs.Peer(zmq(prefill)),
        legs.Peer(zmq(decode)),
    )
    client = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "ignore_eos": True}
    client["stream"] = True

    async def prefill_leg() -> dict | None:
        async with session.post(
            f"http://127.0.0.1:{prefill.port}/v1/completions",
            json=legs.prefill_body(client, h),
            headers=legs.leg_headers(h, "prefill"),
        ) as resp:
            return legs.returned_params(await resp.json())

    async def decode_leg(params: dict | None) -> int:
        async with session.post(
            f"http://127.0.0.1:{decode.port}/v1/completions",
            json=legs.decode_body(client, h, params),
            headers=legs.leg_headers(h, "decode"),
        ) as resp:
            await resp.read()
            return resp.status

    if read:
        return await decode_leg(await prefill_leg())
    _, status = await asyncio.gather(prefill_leg(), decode_leg(None))
    return status


def test_a_read_mode_prefill_forgets_each_request_once_its_decode_took_the_kv():
    prefill, decode = engine("kv_producer", True), engine("kv_consumer", True)

    async def main():
        async with serving(prefill, decode) as (session, states):
            for _ in range(20):
                assert await pd_request(session, prefill, decode, read=True) == 200
            await settle(*states)
            return [kept(s) for s in states], states[0].metrics.transfers

    (p, d), _ = asyncio.run(main())
    assert p == {} and d == {}


def test_a_write_mode_pair_keeps_nothing_per_request():
    prefill, decode = engine("kv_producer", False), engine("kv_consumer", False)

    async def main():
        async with serving(prefill, decode) as (session, states):
            for _ in range(20):
                assert await pd_request(session, prefill, decode, read=False) == 200
            await settle(*states)
            return [kept(s) for s in states], states[1].metrics.transfers["ok"]

    (p, d), pushed = asyncio.run(main())
    assert pushed == 20 and p == {} and d == {}


def test_a_held_kv_that_expires_is_forgotten_by_the_kv_agent_too():
    prefill = replace(engine("kv_producer", True), kv_hold_timeout_s=0.05)
    body = {
        "model": "tiny",
        "prompt": PROMPT,
        "max_tokens": 1,
        "kv_transfer_params": {"do_remote_decode": True, "transfer_id": "tx-nobody-comes"},
    }

    async def main():
        async with serving(prefill) as (session, (state,)):
            for _ in range(3):
                url = f"http://127.0.0.1:{prefill.port}/v1/completions"
                body["kv_transfer_params"]["transfer_id"] = f"tx-{uuid.uuid4().hex}"
                async with session.post(url, json=body) as resp:
                    assert (await resp.json())["kv_transfer_params"]["transfer_id"]
            await settle(state)
            return kept(state), state.engine.scheduler.counters.kv_expired_requests

    left, expired = asyncio.run(main())
    assert expired == 3 and left == {}


def test_a_client_that_goes_away_mid_stream_leaves_no_metric_state():
    local = replace(engine("kv_both", True), kv=None)

    async def main():
        async with serving(local) as (session, (state,)):
            for _ in range(5):
                async with session.post(
                    f"http://127.0.0.1:{local.port}/v1/completions",
                    json={"model": "tiny", "prompt": PROMPT, "max_tokens": 1500, "stream": True},
                ) as resp:
                    await resp.content.readline()
                    await resp.content.readline()  # a few tokens in, then the client leaves
                    resp.close()
            await settle(state)
            return kept(state), state.engine.scheduler.counters.finished["abort"]

    left, aborted = asyncio.run(main())
    assert aborted == 5 and left == {}


def test_a_failed_transfer_recomputed_keeps_no_failure_record():
    decode = engine("kv_consumer", True, load_failure_policy="recompute")
    dead = free_port()  # nothing listens: the pull fails at once
    params = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "transfer_id": "tx-gone",
        "remote_host": "127.0.0.1",
        "remote_handshake_port": dead,
        "remote_block_ids": [0, 1, 2, 3],
    }

    async def main():
        async with serving(decode) as (session, (state,)):
            for i in range(3):
                params["transfer_id"] = f"tx-gone-{i}"
                async with session.post(
                    f"http://127.0.0.1:{decode.port}/v1/completions",
                    json={
                        "model": "tiny",
                        "prompt": PROMPT,
                        "max_tokens": 4,
                        "kv_transfer_params": params,
                    },
                ) as resp:
                    assert resp.status == 200
            await settle(state)
            return kept(state), state.metrics.transfers["failed"]

    left, failed = asyncio.run(main())
    assert failed == 3 and left == {}


def test_a_write_mode_decode_whose_prefill_is_unreachable_awaits_no_push():
    decode = engine("kv_consumer", False)
    params = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_host": "127.0.0.1",
        "remote_notify_port": free_port(),  # nobody there
    }

    async def main():
        async with serving(decode) as (session, (state,)):
            for i in range(3):
                async with session.post(
                    f"http://127.0.0.1:{decode.port}/v1/completions",
                    json={
                        "model": "tiny",
                        "prompt": PROMPT,
                        "max_tokens": 4,
                        "kv_transfer_params": {**params, "transfer_id": f"tx-{i}"},
                    },
                ) as resp:
                    assert resp.status == 500  # kv_load_failure_policy=fail
            await settle(state)
            return kept(state)

    assert asyncio.run(main()) == {}


def test_a_decode_announced_to_a_prefill_that_holds_nothing_is_dropped():
    prefill = engine("kv_producer", False, transfer_timeout_s=0.05)

    async def announce(key: str) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", prefill.kv.notify_port)
        frame = {"op": "notify", "key": key, "block_ids": [0], "host": "127.0.0.1", "port": 1}
        await send_frame(writer, frame)
        assert (await read_frame(reader))["ok"]
        writer.close()

    async def main():
        async with serving(prefill) as (_, (state,)):
            for i in range(5):
                await announce(f"tx-orphan-{i}")
                await asyncio.sleep(0.08)  # past the decode's transfer timeout
            return set(state.agent._targets)

    assert asyncio.run(main()) == {"tx-orphan-4"}


def test_the_block_pool_keeps_no_entry_per_freed_block():
    """vLLM preallocates its free queue; the stand-in must not grow one entry per block
    it ever handed out (a pool has ~400,000 blocks: 100 bytes each is 40 MB by the end)."""
    pool = BlockPool(400_000, enable_caching=False)
    for _ in range(200):  # warm
        pool.free(pool.allocate(9))
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(5_000):
        pool.free(pool.allocate(9))
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    pooled = tracemalloc.Filter(True, "*block_pool.py")
    grown = sum(
        s.size_diff
        for s in after.filter_traces([pooled]).compare_to(
            before.filter_traces([pooled]), "filename"
        )
    )
    assert grown < 10_000, grown  # 45,000 blocks came and went
    assert pool.num_free == pool.num_blocks
