"""A disaggregated request's attempts: the prefill and decode legs, and, when an attempt fails
before any byte reached the client, the next attempt as connector/legs/retry.py decides (another
prefill, another decode, or the pair), within the retry budget. Each attempt counts its own
outstanding load on its instances; a failed one is judged at once (fast ejection) and noted in
the request log; the request is measured on the attempt that served.

An abandoned attempt is aborted on its instance by closing its connection: vLLM (and the
stand-in) abort a request whose client went away.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

from connector.dispatch.flight import Flight, clock
from connector.dispatch.relay import Relay
from connector.errors import ProxyError, UpstreamError
from connector.http.client_stream import ClientAnswer, ClientRequest
from connector.legs.retry import EJECT_AT_ONCE, STALE_ROLE, Retry, RetryBudget, plan
from connector.legs.rewrite import Handoff, Peer, decode_bytes, leg_headers, prefill_body
from connector.measure.metrics import ProxyMetrics
from connector.pool.instances import Instance, InstancePool, Route
from connector.pool.pd_roles import RoleReader, fence
from connector.settings import ProxySettings

log = logging.getLogger("connector.proxy")
Sent = tuple[Handoff, dict[str, Any] | None]  # a hand-off and the prefill's kv_transfer_params
# 409s (stale role/epoch) one request may meet and still be routed again, past the budget
STALE_RETRIES = 4
# An attempt's blame while it waits out its backoff: it never ran, so neither instance failed
NOT_RUN = "not_run"
# Why a retryable failure was not retried (pdctl_proxy_retries_refused_total's reason label)
NOT_RETRIED = {
    "attempts": "the request's attempts are spent",
    "deadline": "the request is past its retry deadline",
    "budget": "the proxy's retry budget is spent",
    "no_prefill": "no other prefill is available",
    "no_decode": "no decode is available",
}


class Disaggregated:
    """Serves one request on a route of a prefill/decode group, retrying where it is safe."""

    def __init__(
        self,
        settings: ProxySettings,
        pool: InstancePool,
        relay: Relay,
        metrics: ProxyMetrics,
    ) -> None:
        self.settings, self.pool, self.relay, self.metrics = settings, pool, relay, metrics
        self.budget = RetryBudget(settings.retry, clock())
        self.roles: RoleReader | None = None  # re-reads a role after a 409 (the proxy's)

    def judge_failed(self, inst: Instance, cause: str | None, error: str) -> None:
        """A leg of `inst` failed: count it; a refused connection, garbage or a hang ejects
        it at once when its group has a spare (the share of its role ejected is capped)."""
        s, now = self.settings, time.monotonic()
        if inst.ejected_until > now or cause == STALE_ROLE:  # a 409 is no failure of it
            return
        inst.last_error = error
        if self.pool.leg_failed(
            inst,
            s.eject_after,
            s.eject_seconds,
            now,
            at_once=cause in EJECT_AT_ONCE,
            max_share=s.eject_max_share,
        ):
            self.metrics.ejections[cause or "failed"] = (
                self.metrics.ejections.get(cause or "failed", 0) + 1
            )
            log.warning("ejected %s %s: %s", inst.role, inst.url, inst.last_error)

    async def serve(
        self, request: ClientRequest, raw: bytes, body: dict[str, Any], route: Route, flight: Flight
    ) -> ClientAnswer:
        prompt_tokens, output_tokens = flight.estimate
        group, decode, prefill = route.group, route.decode, route.prefill
        if prefill is None:
            raise ProxyError("a colocated route has no prefill leg to split")
        tried_p, tried_d = {prefill.url}, {decode.url}
        self.budget.request(clock())
        reuse: Sent | None = None  # the hand-off a retried decode gets again (NIXL refused)
        last: list[Sent | None] = [None]  # the attempt's hand-off and the prefill's answer
        attempt = 0
        stale_left = STALE_RETRIES
        # Counted on this attempt's instances; a retry counts the next attempt's before its
        # backoff, so the request is on the count of the instances it uses at every moment.
        load = _Load(prefill, decode, prompt_tokens, output_tokens)
        ok, blamed = False, None
        try:
            while True:
                attempt += 1
                flight.attempt_starts(clock())
                flight.route = Route(group, prefill, decode)
                ok, blamed = False, None
                try:
                    response = await self._attempt(request, raw, body, flight, reuse, last)
                    ok = flight.error is None
                    blamed = flight.blamed
                    return response
                except UpstreamError as exc:
                    blamed = exc.instance
                    if flight.pinned:
                        raise  # a probe of this pair: another pair would answer for it
                    stale = exc.cause == STALE_ROLE and stale_left > 0
                    if exc.cause == STALE_ROLE:
                        blamed = STALE_ROLE  # a routing event: neither instance failed
                    if stale:  # read its role again, route again
                        stale_left -= 1
                        await self._reread(prefill if exc.instance == prefill.url else decode)
                        for inst in (prefill, decode):
                            if inst.available:  # its role read ready: it may serve this again
                                tried_p.discard(inst.url)
                                tried_d.discard(inst.url)
                    retry = plan(
                        exc.leg,
                        exc.cause,
                        self.settings.connector,
                        group,
                        client_has_bytes=flight.prepared,
                        client_error=False,
                    )
                    if retry is None:
                        raise
                    next_p, next_d = self._next_pair(
                        exc, retry, group, (prefill, decode), (tried_p, tried_d)
                    )
                    if next_p is None or next_d is None:
                        spare = "no_prefill" if next_p is None else "no_decode"
                        raise self._not_retried(exc, attempt, spare) from None
                    failed = prefill if exc.instance == prefill.url else decode
                    off = self._moved_off(failed, exc.cause)
                    # A 409 is a routing event: it spends none of the request's attempts
                    # (a proxy just started learns each instance's epoch from one).
                    tried = attempt - (STALE_RETRIES - stale_left)
                    why = (
                        None
                        if stale
                        else self.budget.why_not(tried, flight.arrival, clock(), moved_off=off)
                    )
                    if why is not None:
                        raise self._not_retried(exc, attempt, why) from None
                    # judged now (fast ejection) when retried; when not, the request's end
                    # judges
                    self.judge_failed(failed, exc.cause, exc.message)
                    key = (exc.leg, exc.cause)
                    self.metrics.retries[key] = self.metrics.retries.get(key, 0) + 1
                    flight.next_attempt(
                        {
                            "leg": exc.leg,
                            "cause": exc.cause,
                            "instance": exc.instance,
                            "prefill": prefill.url,
                            "decode": decode.url,
                            "error": exc.message,
                        }
                    )
                    reuse = _reused(last[0], next_d) if retry.reuse_params else None
                    prefill, decode = next_p, next_d
                    tried_p.add(prefill.url)
                    tried_d.add(decode.url)
                    # The next attempt's count begins as this one's ends, no await between:
                    # a drain that reads the proxy during the backoff sees the request on
                    # the instance it will use. (Uncounted through its backoff, a retry went
                    # to a decode that a roll had drained and stopped meanwhile.)
                    ended = load
                    load = _Load(
                        prefill if reuse is None else None, decode, prompt_tokens, output_tokens
                    )
                    ended.end(ok, blamed, prefill_done=flight.prefill_end is not None)
                    ok, blamed = False, NOT_RUN
                    await asyncio.sleep(self.budget.backoff(attempt))
        finally:
            load.end(ok, blamed, prefill_done=ok or flight.prefill_end is not None)

    def _next_pair(
        self,
        exc: UpstreamError,
        retry: Retry,
        group: str,
        pair: tuple[Instance, Instance],
        tried: tuple[set[str], set[str]],
    ) -> tuple[Instance | None, Instance | None]:
        """The failed attempt's next prefill and decode, as `retry` asks (None: none); the
        URLs `tried` (prefills, decodes) are not picked again."""
        (prefill, decode), (tried_p, tried_d) = pair, tried
        next_p: Instance | None = prefill
        if retry.new_prefill:
            other = self.pool.pick_other(group, "prefill", tried_p)
            if other is None and exc.leg == "prefill":
                return None, None  # no other prefill: the client gets this one's error
            next_p = other or (prefill if prefill.available else None)
        next_d = decode if decode.available else None
        if retry.new_decode:
            # another decode; else this one again with another prefill, unless the failure
            # says the decode itself is broken. A first byte that never came may be the
            # pair's (a decode holding a restarted prefill's stale agent hangs on it alone):
            # with no other decode, the same one with another prefill is the only chance,
            # ejected or not (the 2P2D chaos row lost a request while the other decode
            # restarted).
            other = self.pool.pick_other(group, "decode", tried_d)
            new_pair = next_p is not prefill and next_p is not None
            # So may an error before any token (a KV load that failed through the stale
            # agent), while the decode is up and not leaving.
            kept = decode.healthy and not decode.draining
            pair_fault = exc.cause == "first_byte" or (exc.cause == "status" and kept)
            if other is None and new_pair and pair_fault:
                next_d = decode
            else:
                same = new_pair and exc.cause not in EJECT_AT_ONCE
                next_d = other or (next_d if same else None)
        return next_p, next_d

    def _moved_off(self, failed: Instance, cause: str) -> bool:
        """The failed instance is out of routing, or this failure takes it out (a refusal,
        garbage or a hang with a spare): its requests move without a retry token."""
        if not failed.available:
            return True
        s = self.settings
        at_once = cause in EJECT_AT_ONCE and s.eject_after > 0
        return at_once and self.pool.may_eject(failed, s.eject_max_share, time.monotonic())

    def _not_retried(self, exc: UpstreamError, attempts: int, why: str) -> UpstreamError:
        """A retryable failure that is not retried: counted by why, and the client's error
        (and the request log) say why, so an operator can tell a spent budget from no spare."""
        self.metrics.retries_refused[why] = self.metrics.retries_refused.get(why, 0) + 1
        tried = f"{attempts} attempts" if attempts > 1 else "1 attempt"
        exc.message = f"{exc.message} (not retried after {tried}: {NOT_RETRIED[why]})"
        exc.args = (exc.message,)
        return exc

    async def _reread(self, inst: Instance) -> None:
        fence(self.pool, inst)
        if self.roles is not None:
            await self.roles.refresh(inst)

    async def _attempt(
        self,
        request: ClientRequest,
        raw: bytes,
        body: dict[str, Any],
        flight: Flight,
        reuse: Sent | None,
        last: list[Sent | None],
    ) -> ClientAnswer:
        route = flight.route
        if route is None or route.prefill is None:
            raise ProxyError("an attempt needs a prefill/decode route")
        prefill, decode = route.prefill, route.decode
        if reuse is not None:
            h, params = reuse
        else:
            h = Handoff(
                self.settings.connector,
                route.group,
                os.urandom(16).hex(),
                Peer(prefill.zmq_address, prefill.dp_size, prefill.tp_size),
                Peer(decode.zmq_address, decode.dp_size, decode.tp_size),
                prefill.next_dp_rank(),
                decode.next_dp_rank(),
            )
            params = None
        flight.request_id = h.request_id
        decode_headers = leg_headers(h, "decode")
        if route.group == "read":
            if reuse is None:
                params = await self.relay.prefill(
                    prefill,
                    flight.leg_path or request.path,
                    json.dumps(prefill_body(body, h, flight.pull_params)).encode(),
                    leg_headers(h, "prefill"),
                    flight,
                )
            last[0] = (h, params)
            return await self.relay.pass_through(
                request,
                "decode",
                decode,
                decode_bytes(raw, body, h, params),
                decode_headers,
                flight,
            )
        return await self._write(request, raw, body, flight, h, prefill, decode)

    async def _write(
        self,
        request: ClientRequest,
        raw: bytes,
        body: dict[str, Any],
        flight: Flight,
        h: Handoff,
        prefill: Instance,
        decode: Instance,
    ) -> ClientAnswer:
        """Write mode: both legs at once; a prefill failing before the first decode byte
        reaches the client cancels the decode leg and the prefill's error is the attempt's."""
        prefill_task = asyncio.create_task(
            self.relay.prefill(
                prefill,
                flight.leg_path or request.path,
                json.dumps(prefill_body(body, h)).encode(),
                leg_headers(h, "prefill"),
                flight,
            )
        )
        relay_task = asyncio.create_task(
            self.relay.pass_through(
                request,
                "decode",
                decode,
                decode_bytes(raw, body, h, None),
                leg_headers(h, "decode"),
                flight,
                prefill_task,
            )
        )

        def on_prefill_done(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None and not flight.prepared:
                relay_task.cancel()

        prefill_task.add_done_callback(on_prefill_done)
        try:
            return await relay_task
        except asyncio.CancelledError:
            if prefill_task.done() and not prefill_task.cancelled():
                failed = prefill_task.exception()
                if failed is not None:
                    raise failed from None
            raise
        finally:
            prefill_task.remove_done_callback(on_prefill_done)
            if not prefill_task.done():
                prefill_task.cancel()
            await asyncio.gather(prefill_task, return_exceptions=True)


class _Load:
    """One attempt's count on its instances (its prefill's only when it runs a prefill leg):
    begun when made, ended once with the attempt's verdict."""

    def __init__(self, prefill: Instance | None, decode: Instance, prompt: int, output: int):
        self.prefill, self.decode = prefill, decode
        self.prompt, self.total = prompt, prompt + output
        decode.begin(self.total)
        if prefill is not None:
            prefill.begin(prompt)

    def end(self, ok: bool, blamed: str | None, *, prefill_done: bool) -> None:
        self.decode.end(self.total, _verdict(ok, blamed, self.decode))
        if self.prefill is not None:
            self.prefill.end(self.prompt, prefill_done or _verdict(ok, blamed, self.prefill))


def _verdict(ok: bool, blamed: str | None, inst: Instance) -> bool | None:
    """For an instance's counts: served, failed there, or None (the other leg failed, or the
    attempt never ran)."""
    if ok:
        return True
    return False if blamed == inst.url or blamed is None else None


def _reused(last: Sent | None, decode: Instance) -> Sent | None:
    """The last prefill's hand-off and answer, for a decode retried with the same
    kv_transfer_params (the first decode refused the connection: nothing was pulled)."""
    if last is None:
        return None
    h, params = last
    same = Handoff(
        h.connector,
        h.mode,
        h.request_hex,
        h.prefill,
        Peer(decode.zmq_address, decode.dp_size, decode.tp_size),
        h.prefill_dp_rank,
        decode.next_dp_rank(),
    )
    return same, params
