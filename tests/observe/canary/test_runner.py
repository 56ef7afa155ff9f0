"""When the canary runner sends: once a proxy and a pair run, one period after, then every
period (observe/canary/runner.py; no HTTP here: the probe it would start is stubbed)."""

import asyncio
from types import SimpleNamespace

from observe.canary.runner import CanaryRunner

SPEC = SimpleNamespace(
    topology="disaggregated", model="tiny", canary=SimpleNamespace(interval_s=2.0, max_tokens=4)
)
DEP = SimpleNamespace(spec=SPEC, admin_token="t")


def units(prefill: str, decode: str) -> list[dict]:
    return [
        {"name": "proxy", "role": "proxy", "state": "RUNNING", "url": "http://p"},
        {"name": "prefill-0", "role": "prefill", "state": prefill, "url": "http://a"},
        {"name": "decode-0", "role": "decode", "state": decode, "url": "http://b"},
    ]


def test_no_canary_while_the_pair_starts_then_one_per_period():
    async def scenario() -> list[float]:
        runner, sent = CanaryRunner(), []

        async def probe(name, proxy_url, token, body, prefills):
            sent.append(now)

        runner._probe = probe
        now = 0.0
        for now, prefill, decode in [
            (0.0, "STARTING", "STARTING"),
            (10.0, "RUNNING", "STARTING"),  # a real engine starts for minutes: no canary
            (60.0, "RUNNING", "RUNNING"),  # the pair runs: the first one period later
            (61.0, "RUNNING", "RUNNING"),
            (62.0, "RUNNING", "RUNNING"),
            (63.0, "RUNNING", "RUNNING"),
            (64.5, "RUNNING", "RUNNING"),
        ]:
            runner.tick("pd", DEP, units(prefill, decode), now)
            await asyncio.sleep(0)  # the probe task runs and is done
        return sent

    assert asyncio.run(scenario()) == [62.0, 64.5]
