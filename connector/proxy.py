"""The PD proxy's request path: each request split into a prefill and a decode leg (or
balanced whole over a colocated group), and measured as the client sees it.

Kept cheap on purpose: the legs go over the proxy's own kept-alive client
(connector/http/upstream.py); their I/O (connector/dispatch/relay.py) forwards decode SSE bytes
untouched and only scans them for event boundaries, token events and usage.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import aiohttp
from aiohttp import web

from connector.dispatch import canary
from connector.dispatch.attempts import Disaggregated
from connector.dispatch.bidir_kv import BidirectionalKV
from connector.dispatch.encoders import EncoderRing
from connector.dispatch.flight import Flight, clock
from connector.dispatch.hangs import answer_grace
from connector.dispatch.hold import HoldQueue
from connector.dispatch.relay import ClientGone, Relay
from connector.dispatch.render_tier import RenderCollector, RenderTier, legs_of
from connector.dispatch.request_log import LoggedRequest, RequestLog
from connector.errors import (
    BadRequest,
    BodyTooSlow,
    ProxyError,
    TooLarge,
    Unavailable,
    UpstreamError,
)
from connector.http.client_stream import ClientAnswer, ClientRequest
from connector.legs.client_body import (
    asked_tokens,
    estimate_tokens,
    parse_client_body,
    turn_kind,
)
from connector.legs.rewrite import colocated_bytes
from connector.measure.interference import Interference
from connector.measure.metrics import ProxyMetrics, make_registry
from connector.membership import Membership
from connector.pool.instances import Instance, InstancePool, Route
from connector.pool.pd_roles import RoleReader
from connector.pool.policy import make_policy
from connector.settings import ProxySettings
from domain.measures.ttft_parts import PARTS_HEADER
from domain.modes import Mode, Role

log = logging.getLogger(__name__)

PROXY_KEY: web.AppKey[Proxy] = web.AppKey("proxy")
RUNNER_KWARGS: dict[str, Any] = {
    "handler_cancellation": True,
    "access_log": None,
    "keepalive_timeout": 75.0,  # an idle client connection closes after this
    # a client told 413 before its body came may finish sending it this long, no longer
    "lingering_time": 2.0,
}


def error_response(exc: ProxyError) -> web.Response:
    return web.Response(
        body=exc.body_bytes(),
        status=exc.status,
        content_type="application/json",
        headers=exc.headers(),
    )


class Proxy:
    """Everything the app owns: the instance pool, the client session, metrics, the request log."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.pool = InstancePool(make_policy(settings.policy))
        self.metrics = ProxyMetrics()
        self.hold = HoldQueue(settings, self.pool, self.metrics)
        self.pool.on_change = self.hold.notify
        self.interference = Interference()
        self.relay = Relay(settings, self.pool, self.interference)
        self.registry = make_registry(self.metrics, self.pool)
        self.requests = RequestLog(settings.request_log_size)
        self.membership = Membership(settings, self.pool, self.metrics)
        self.disaggregated = Disaggregated(settings, self.pool, self.relay, self.metrics)
        # NIXL bidirectional KV for multi-turn, when the deployment turned it on
        self.bidir = BidirectionalKV(settings, self.metrics) if settings.bidirectional_kv else None
        self.roles = RoleReader(self.pool, lambda: self.session)  # connector/pool/pd_roles.py
        self.encoders = EncoderRing(self.pool)  # E -> P -> D (connector/dispatch/encoders.py)
        self.registry.register(self.encoders)
        self.disaggregated.roles = self.membership.roles = self.roles
        self.hold.reprobe = self.membership.reprobe_down
        self.relay.watchdog.on_hung = self._hung
        self.session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []
        for flag in settings.prefill:
            self.pool.upsert(flag.url, "prefill", settings.mode, zmq_address=flag.zmq_address)
        for flag in settings.decode:
            self.pool.upsert(flag.url, "decode", settings.mode, zmq_address=flag.zmq_address)
        for flag in settings.instance:
            self.pool.upsert(flag.url, Role.COLOCATED, Mode.COLOCATED)
        for flag in settings.encode:
            self.pool.upsert(flag.url, Role.ENCODE, settings.mode)
        self.render = RenderTier(tuple(flag.url for flag in settings.render))
        self.registry.register(RenderCollector(self.render))

    @property
    def registry_port(self) -> int | None:
        return self.membership.port

    # -- lifecycle ---------------------------------------------------------------------------
    async def startup(self, app: web.Application) -> None:
        self.hold.start()
        self.session = self.relay.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),  # engines set none: no jar to filter per leg
        )
        self.membership.start(self.session)
        self._tasks.append(asyncio.create_task(self._watch_loop_lag()))
        self._tasks.append(asyncio.create_task(self.relay.watchdog.run()))

    async def cleanup(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.membership.stop()
        self.relay.upstream.close()
        if self.session is not None:
            await self.session.close()

    async def _watch_loop_lag(self) -> None:
        loop, interval = asyncio.get_running_loop(), self.settings.loop_lag_interval
        while True:
            start = loop.time()
            await asyncio.sleep(interval)
            self.metrics.loop_lag = max(0.0, loop.time() - start - interval)

    async def _read_body(self, request: ClientRequest) -> bytes:
        length = request.content_length
        if length is not None and length > self.settings.max_body_bytes:
            raise self._too_large()  # at once: the body is not waited for
        try:
            if request.content.is_eof():  # the whole body came with the head: no deadline
                return await request.read()
            async with asyncio.timeout(self.settings.body_timeout):
                return await request.read()
        except TimeoutError:
            raise self._too_slow() from None
        except web.HTTPRequestEntityTooLarge:
            raise self._too_large() from None

    def _too_slow(self) -> BodyTooSlow:
        return BodyTooSlow(
            f"request body not received within {self.settings.body_timeout:g} s "
            "(the proxy's --body-timeout)"
        )

    def _too_large(self) -> TooLarge:
        return TooLarge(
            f"request body larger than {self.settings.max_body_bytes} bytes "
            "(the proxy's --max-body-bytes)"
        )

    # -- the request path --------------------------------------------------------------------
    async def generate(self, request: ClientRequest) -> ClientAnswer:
        flight = Flight(clock(), request.path)
        flight.ttft_parts = self.settings.ttft_parts
        flight.want_parts = flight.ttft_parts and PARTS_HEADER in request.headers
        marked = canary.mark(request.headers, self.settings.admin_token)
        is_canary = marked == "canary"  # left out of the SLO figures (connector/dispatch/canary.py)
        if marked == "forged":
            self.metrics.canaries["forged"] = self.metrics.canaries.get("forged", 0) + 1
        if not is_canary:
            self.metrics.arrived(flight.arrival)
        outcome = "failed"
        try:
            raw = await self._read_body(request)
            body = parse_client_body(raw, request.path)
            flight.stream = body.get("stream") is True
            flight.estimate = estimate_tokens(body)
            flight.answer_grace = answer_grace(flight.stream, asked_tokens(body))
            if not is_canary:
                self.metrics.demand.arrived(*flight.estimate)
                self.metrics.turns[turn_kind(body, request.path)] += 1
                if self.bidir is not None:
                    self.bidir.before(body, request.path, flight)
            legs = body
            if self.render.renders(request.path):  # token ids from the render tier
                raw, legs = await self.render.render(self.relay.client(), request.path, raw, body)
                flight.leg_path, flight.reshape = legs_of(request.path)
            pinned = canary.pinned_route(request.headers, marked, self.pool)
            flight.pinned = pinned is not None
            route = pinned or await self.hold.acquire_route()
            flight.route = route
            response = await self._serve(request, raw, legs, route, flight)
            outcome = "failed" if flight.error else "ok"
            if self.bidir is not None and outcome == "ok":
                self.bidir.after(body, flight)
            if is_canary and not response.prepared:
                prefill = route.prefill.url if route.prefill is not None else None
                response.headers.update(canary.pair_headers(prefill, route.decode.url))
            return response
        except ProxyError as exc:
            outcome = (
                "invalid"
                if isinstance(exc, BadRequest | TooLarge)
                else "rejected"
                if isinstance(exc, Unavailable)
                else "failed"
            )
            flight.status, flight.error = exc.status, exc.message
            if isinstance(exc, UpstreamError):
                flight.blamed, flight.cause = exc.instance, exc.cause
            if flight.prepared:  # headers are gone: the error travels in the stream (written)
                return web.StreamResponse()
            response = error_response(exc)
            if isinstance(exc, TooLarge):  # its body was not read: the connection cannot go on
                response.force_close()
            return response
        except asyncio.CancelledError:
            outcome = _hung_up(flight)
            raise
        except ClientGone:
            outcome = _hung_up(flight)
            return web.StreamResponse()  # the client is gone: nothing more can be written
        finally:
            self._finish(flight, outcome, is_canary)

    async def _serve(
        self,
        request: ClientRequest,
        raw: bytes,
        body: dict[str, Any],
        route: Route,
        flight: Flight,
    ) -> ClientAnswer:
        self.metrics.in_flight += 1
        try:
            if self.session is not None:  # a chat's images go to the encoders first
                timeout = self.settings.prefill_timeout
                sent = await self.encoders.prime(self.session, request.path, body, _hex(), timeout)
                if sent and not flight.pinned and not self._still_routable(route):
                    # Not yet counted on its route while the encoders ran: a drain may have
                    # found its instances idle and stopped them meanwhile.
                    route = await self.hold.acquire_route()
                    flight.route = route
            if route.prefill is not None:
                return await self.disaggregated.serve(request, raw, body, route, flight)
            return await self._colocated(request, raw, body, route.decode, flight)
        finally:
            self.metrics.in_flight -= 1

    async def _colocated(
        self,
        request: ClientRequest,
        raw: bytes,
        body: dict[str, Any],
        inst: Instance,
        flight: Flight,
    ) -> ClientAnswer:
        load = sum(flight.estimate)
        inst.begin(load)
        ok = False
        try:
            flight.attempt_starts(clock())
            flight.request_id = os.urandom(16).hex()
            headers = {"Content-Type": "application/json", "X-Request-Id": flight.request_id}
            response = await self.relay.pass_through(
                request, "colocated", inst, colocated_bytes(raw, body), headers, flight
            )
            ok = flight.error is None
            return response
        finally:
            inst.end(load, ok)

    def _still_routable(self, route: Route) -> bool:
        """Every instance of `route` is still the pool's, up and not draining (an ejected one
        is still routed to when it is its role's last)."""
        legs = (route.prefill, route.decode)
        return all(
            self.pool.get(i.url) is i and i.healthy and not i.draining
            for i in legs
            if i is not None
        )

    def _hung(self, inst: Instance, why: str) -> None:
        """The watchdog found `inst` hung (connector/dispatch/relay.py): out at once, with a
        spare."""
        self.disaggregated.judge_failed(inst, "first_byte", why)

    def _finish(self, flight: Flight, outcome: str, is_canary: bool = False) -> None:
        self._judge_instances(flight, outcome)
        timing, met = flight.measure(outcome, self.settings.slo, clock())
        if is_canary:  # served, judged for ejection, logged; never in the SLO figures
            self.metrics.canaries[outcome] = self.metrics.canaries.get(outcome, 0) + 1
            self.requests.append(LoggedRequest(flight, outcome, timing, met, canary=True))
            return
        self.metrics.record(outcome, timing, met)
        if outcome == "ok":
            demand = self.metrics.demand
            demand.finished("prompt", flight.estimate[0], flight.usage_prompt)
            answered = flight.usage_tokens
            if answered is None and flight.stream:  # no usage asked for: its token events
                answered = len(flight.token_times)
            demand.finished("output", flight.estimate[1], answered)
        if timing is not None and flight.route is not None:
            spikes, lined_up = self.interference.spikes(
                flight.route.decode.url, flight.token_times, timing.sorted_itls
            )
            self.metrics.itl_spikes += spikes
            self.metrics.itl_spikes_at_prefill += lined_up
        self.requests.append(LoggedRequest(flight, outcome, timing, met))

    def _judge_instances(self, flight: Flight, outcome: str) -> None:
        """Outlier ejection: the instance a failure names counts a failed leg; every instance
        of a request that succeeded starts its count again."""
        route = flight.route
        if route is None:
            return
        for inst in (route.prefill, route.decode):
            if inst is None:
                continue
            if inst.url == flight.blamed:
                self.disaggregated.judge_failed(inst, flight.cause, flight.error or "")
            elif outcome == "ok":
                self.pool.leg_ok(inst)


def _hex() -> str:
    return os.urandom(16).hex()


def _hung_up(flight: Flight) -> str:
    """The outcome of a request whose client hung up. A client that had everything up to
    [DONE] and left before the closing chunk (clients stop reading at [DONE]) was served."""
    if flight.done_at is not None:
        flight.end = flight.end or flight.done_at
        return "ok"
    flight.error = "client disconnected"
    return "cancelled"
