"""A busy engine is never taken for a dead one (issue 39, item 4): on CI a real CPU vLLM decode,
the only one, left the proxy's /health probes unanswered past their timeout twice in a row
while it served, the proxy marked it down, and a request got "503 ... group read: no
available decode instance". Reproduced with stand-ins whose /health answers late while they
serve (the "slow_health" fault, simulator/config/faults.py): the proxy judges by what the
engine does, and a probe alone never takes the last instance of a role out of routing."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.processes import free_port, http_post, running, sim
from tests.connector.fakes import completion, run, settings_for
from tests.connector.fakes import running as proxy_running
from tests.connector.test_proxy import post

pytestmark = pytest.mark.e2e

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
PROBE = {"health_interval": 0.2, "health_timeout": 0.3}  # each probe times out: /health takes 1 s


def _sims(tmp_path, *names: str):
    return [
        sim(
            tmp_path,
            name,
            "--enable-fault-injection",
            "--kv-transfer-config",
            json.dumps(NIXL),
            env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
        )
        for name in names
    ]


def _slow_health(*procs) -> None:
    for proc in procs:
        status, _ = http_post(proc.url + "/_fault", {"fault": "slow_health", "seconds": 1.0})
        assert status == 200


async def _light_load(base: str, proxy, urls: list[str], seconds: float, gap: float):
    """One request every `gap` s for `seconds` (light: mostly nothing in flight when a probe
    times out); every answer, and whether a decode was ever out of routing."""
    statuses: list[tuple[int, bytes]] = []
    marked_down: set[str] = set()
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        status, _, raw = await post(base, completion(max_tokens=3, stream=False))
        statuses.append((status, raw))
        marked_down |= {u for u in urls if not proxy.pool.get(u).healthy}
        await asyncio.sleep(gap)
    return statuses, marked_down


def test_the_only_decode_answering_health_late_while_it_serves_stays_routable(tmp_path):
    prefill, decode = _sims(tmp_path, "prefill", "decode")
    with running(prefill, decode):
        _slow_health(decode)

        async def body():
            settings = settings_for([prefill], [decode], **PROBE)
            async with proxy_running(settings) as (base, proxy):
                return await _light_load(base, proxy, [decode.url], 3.0, 0.4)

        statuses, marked_down = run(body(), timeout=30)
    failed = [raw[:120] for status, raw in statuses if status != 200]
    assert failed == [], failed  # main: 503 "group read: no available decode instance"
    assert marked_down == set()
    assert len(statuses) >= 5


def test_decodes_with_a_spare_answering_health_late_while_they_serve_are_not_all_dropped(
    tmp_path,
):
    prefill, d0, d1 = _sims(tmp_path, "prefill", "d0", "d1")
    with running(prefill, d0, d1):
        _slow_health(d0, d1)

        async def body():
            settings = settings_for([prefill], [d0, d1], **PROBE)
            async with proxy_running(settings) as (base, proxy):
                out = await _light_load(base, proxy, [d0.url, d1.url], 3.0, 0.05)
                return out, [proxy.pool.get(u).healthy for u in (d0.url, d1.url)]

        (statuses, _), healthy = run(body(), timeout=30)
    failed = [raw[:120] for status, raw in statuses if status != 200]
    assert failed == [], failed
    assert any(healthy)  # main: both down, every request 503


def test_the_only_decode_that_refuses_connections_is_still_marked_down(tmp_path):
    """The rule keeps a slow engine, not a dead one: nothing listening is no slow reply."""
    (prefill,) = _sims(tmp_path, "prefill")
    gone = free_port()  # nothing listens there

    class Gone:
        url = f"http://127.0.0.1:{gone}"

    with running(prefill):

        async def body():
            settings = settings_for([prefill], [Gone], **PROBE)
            async with proxy_running(settings) as (base, proxy):
                inst = proxy.pool.get(Gone.url)
                loop = asyncio.get_running_loop()
                end = loop.time() + 5
                while inst.healthy and loop.time() < end:
                    await asyncio.sleep(0.05)
                status, _, raw = await post(base, completion(stream=False))
                return inst.healthy, status, raw

        healthy, status, raw = run(body(), timeout=30)
    assert not healthy
    assert status == 503 and b"no available decode instance" in raw, raw
