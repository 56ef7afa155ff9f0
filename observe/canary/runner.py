"""The correctness canary's shell: sends each disaggregated deployment's canary through its
proxy when due (observe/canary/state.py decides, compares and keeps the state), asks the serving
prefill alone for the colocated reference, and hands the verdicts' events to the observer.

Driven by the observer's tick; each probe runs as its own task, bounded by a timeout, so a
slow proxy never delays a scrape. At most one probe per deployment is in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp

from domain.canary_marks import DECODE_HEADER, HEADER, PREFILL_HEADER
from domain.measures import per_request_metrics
from observe.canary import state as canary
from observe.canary.state import CanaryState, Transition, Verdict

log = logging.getLogger("pdctl.observe.canary")
# Generous: a correctness check, not a latency one. Under load the prefill asked alone batches
# each of its decode steps with other prompts' prefills (the interference PD removes): 16
# tokens took 52-56 s on the CPU vLLM pair under two streams, against 0.8 s idle.
PROBE_TIMEOUT_S = 120.0


class CanaryError(Exception):
    """A canary that could not be judged (no answer, a refusal, not a completion)."""


class CanaryRunner:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.states: dict[str, CanaryState] = {}
        self.events: list[tuple[str, Transition]] = []  # taken by the observer's housekeeping
        self._tasks: dict[str, asyncio.Task] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def section(self, name: str, spec: Any) -> dict:
        applies = str(spec.topology) != "colocated"
        why = None if applies else "colocated: no hand-off to check"
        return canary.section(self.states.get(name), spec.canary.interval_s, applies, why)

    def tick(self, name: str, dep: Any, units: list[dict[str, Any]], now: float) -> None:
        """Start a probe of `name` if one is due and its proxy and a pair run. Not before:
        a real engine starts for minutes, and a canary then would only count errors."""
        spec = dep.spec
        state = self.states.setdefault(name, CanaryState())
        if str(spec.topology) == "colocated" or name in self._tasks:
            return
        proxy = next((u for u in units if u.get("role") == "proxy"), None)
        if proxy is None or proxy.get("state") != "RUNNING" or not proxy.get("url"):
            return
        prefills, decodes = (_running(units, role) for role in ("prefill", "decode"))
        if not prefills or not decodes:
            return
        if state.last_sent is None:  # the first canary one period after a pair runs
            self.states[name] = replace(state, last_sent=now)
            return
        if not canary.due(state.last_sent, spec.canary.interval_s, now):
            return
        self.states[name] = replace(state, last_sent=now)
        body = canary.request_body(spec.model, spec.canary.max_tokens)
        task = asyncio.create_task(
            self._probe(name, proxy["url"], dep.admin_token, body, prefills),
            name=f"pdctl-canary-{name}",
        )
        self._tasks[name] = task
        task.add_done_callback(lambda _t: self._tasks.pop(name, None))

    def forget(self, names: set[str]) -> None:
        self.states = {k: v for k, v in self.states.items() if k in names}

    async def _probe(
        self, name: str, proxy_url: str, token: str | None, body: dict, prefills: list[str]
    ) -> None:
        try:
            verdict = await self._judge(name, proxy_url, token, body, prefills)
        except (CanaryError, aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            verdict = Verdict("error", self.clock(), note=str(exc) or type(exc).__name__)
        state = self.states.get(name)
        if state is None:  # the deployment went meanwhile
            return
        self.states[name], moved = canary.step(state, verdict)
        self.events += [(name, t) for t in moved]
        if verdict.result == "error":
            log.info("%s: canary not judged: %s", name, verdict.note)

    async def _judge(
        self, name: str, proxy_url: str, token: str | None, body: dict, prefills: list[str]
    ) -> Verdict:
        headers = {HEADER: token or ""}
        status, answer, got, timing = await self._post(proxy_url, body, headers)
        if status != 200 or answer is None:
            raise CanaryError(f"the proxy answered {status}, not a completion")
        prefill = got.get(PREFILL_HEADER) or (prefills[0] if prefills else None)
        decode = got.get(DECODE_HEADER) or None
        state = self.states[name]
        refs = [list(r) for r in state.references]
        fresh = None
        if not canary.matches_any(refs, answer, None):
            fresh = await self._alone(prefill, body)
            if not refs:
                refs = [fresh]  # the first reference: recorded now, from the same prefill
        result, diff, refs = canary.judge(refs, answer, fresh)
        note = "re-recorded" if fresh is not None and result == "ok" and state.references else None
        self.states[name] = replace(self.states[name], references=tuple(map(tuple, refs)))
        return Verdict(result, self.clock(), prefill, decode, diff, note, timing)

    async def _alone(self, prefill: str | None, body: dict) -> list[str]:
        """The model's colocated answer: the prefill asked alone (no KV moves)."""
        if prefill is None:
            raise CanaryError("no running prefill to record the colocated reference from")
        status, answer, _, _ = await self._post(prefill, body, {})
        if status != 200 or answer is None:
            raise CanaryError(f"the prefill {prefill} alone answered {status}, not a completion")
        return answer

    async def _post(
        self, url: str, body: dict, headers: dict[str, str]
    ) -> tuple[int, list[str] | None, dict[str, str], dict[str, float] | None]:
        if self._session is None:
            self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
        async with self._session.post(
            url + "/v1/completions", json=body, headers=headers, timeout=timeout
        ) as resp:
            payload = await resp.json(content_type=None) if resp.status == 200 else None
            timing = per_request_metrics.read(
                payload.get("metrics") if isinstance(payload, dict) else None
            )
            return resp.status, canary.answer_tokens(payload), dict(resp.headers), timing


def _running(units: list[dict[str, Any]], role: str) -> list[str]:
    """The URLs of the running instances of `role`."""
    return [
        u["url"]
        for u in units
        if u.get("role") == role and u.get("state") == "RUNNING" and u.get("url")
    ]
