"""The PD proxy's request path: each request split into a prefill and a decode leg (or
balanced whole over a colocated group), and measured as the client sees it.

Kept cheap on purpose: one long-lived ClientSession; the legs' I/O (connector/relay.py) forwards
decode SSE bytes untouched and only scans them for event boundaries, token events and usage.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from typing import Any

import aiohttp
from aiohttp import web

from connector.client_body import estimate_tokens, parse_client_body, turn_kind
from connector.errors import (
    BadRequest,
    BodyTooSlow,
    ProxyError,
    TooLarge,
    Unavailable,
    UpstreamError,
)
from connector.flight import Flight, clock
from connector.hold import HoldQueue
from connector.instances import Instance, InstancePool, Route
from connector.interference import Interference
from connector.legs import Handoff, Peer, decode_body, leg_headers, prefill_body
from connector.membership import Membership
from connector.metrics import ProxyMetrics, make_registry
from connector.policy import make_policy
from connector.relay import ClientGone, Relay
from connector.settings import ProxySettings
from connector.upstream import UpstreamPool
from domain.modes import Mode, Role

log = logging.getLogger(__name__)

PROXY_KEY: web.AppKey[Proxy] = web.AppKey("proxy")
RUNNER_KWARGS: dict[str, Any] = {"handler_cancellation": True, "access_log": None}
# "aiohttp": every leg over aiohttp's client (the proxy's own HTTP/1.1 client otherwise)
UPSTREAM_CLIENT_ENV = "PDCTL_PROXY_UPSTREAM_CLIENT"


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
        self.requests: deque[dict[str, Any]] = deque(maxlen=settings.request_log_size)
        self.membership = Membership(settings, self.pool, self.metrics)
        self.session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []
        for flag in settings.prefill:
            self.pool.upsert(flag.url, "prefill", settings.mode, zmq_address=flag.zmq_address)
        for flag in settings.decode:
            self.pool.upsert(flag.url, "decode", settings.mode, zmq_address=flag.zmq_address)
        for flag in settings.instance:
            self.pool.upsert(flag.url, Role.COLOCATED, Mode.COLOCATED)

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
        if os.environ.get(UPSTREAM_CLIENT_ENV, "pdctl") != "aiohttp":
            self.relay.upstream = UpstreamPool(self.settings.connect_timeout)
        self.membership.start(self.session)
        self._tasks.append(asyncio.create_task(self._watch_loop_lag()))
        self._tasks.append(asyncio.create_task(self.relay.watch_silence()))

    async def cleanup(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.membership.stop()
        if self.relay.upstream is not None:
            self.relay.upstream.close()
        if self.session is not None:
            await self.session.close()

    async def _watch_loop_lag(self) -> None:
        loop, interval = asyncio.get_running_loop(), self.settings.loop_lag_interval
        while True:
            start = loop.time()
            await asyncio.sleep(interval)
            self.metrics.loop_lag = max(0.0, loop.time() - start - interval)

    async def _read_body(self, request: web.Request) -> bytes:
        try:
            if request.content.is_eof():  # the whole body came with the head: no deadline
                return await request.read()
            async with asyncio.timeout(self.settings.body_timeout):
                return await request.read()
        except TimeoutError:
            raise BodyTooSlow(
                f"request body not received within {self.settings.body_timeout:g} s "
                "(the proxy's --body-timeout)"
            ) from None
        except web.HTTPRequestEntityTooLarge:
            raise TooLarge(
                f"request body larger than {self.settings.max_body_bytes} bytes "
                "(the proxy's --max-body-bytes)"
            ) from None

    # -- the request path --------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        flight = Flight(clock(), request.path)
        self.metrics.arrived(flight.arrival)
        outcome = "failed"
        try:
            body = parse_client_body(await self._read_body(request), request.path)
            flight.stream = body.get("stream") is True
            self.metrics.turns[turn_kind(body, request.path)] += 1
            route = await self.hold.acquire_route()
            flight.route = route
            response = await self._serve(request, body, route, flight)
            outcome = "failed" if flight.error else "ok"
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
                flight.blamed = exc.instance
            if flight.prepared:  # headers are gone: the error travels in the stream (written)
                return web.StreamResponse()
            return error_response(exc)
        except asyncio.CancelledError:
            outcome = _hung_up(flight)
            raise
        except ClientGone:
            outcome = _hung_up(flight)
            return web.StreamResponse()  # the client is gone: nothing more can be written
        finally:
            self._finish(flight, outcome)

    async def _serve(
        self, request: web.Request, body: dict[str, Any], route: Route, flight: Flight
    ) -> web.StreamResponse:
        prompt_tokens, output_tokens = estimate_tokens(body)
        decode, prefill = route.decode, route.prefill
        decode_load = prompt_tokens + output_tokens
        decode.begin(decode_load)
        if prefill is not None:
            prefill.begin(prompt_tokens)
        ok = False
        self.metrics.in_flight += 1
        try:
            if prefill is None:
                flight.request_id = os.urandom(16).hex()
                headers = {"Content-Type": "application/json", "X-Request-Id": flight.request_id}
                response = await self.relay.pass_through(
                    request, "colocated", decode, json.dumps(body), headers, flight
                )
            else:
                response = await self._disaggregated(request, body, route, prefill, flight)
            ok = flight.error is None
            return response
        finally:
            self.metrics.in_flight -= 1
            decode.end(decode_load, ok)
            if prefill is not None:
                prefill.end(prompt_tokens, ok or flight.prefill_end is not None)

    async def _disaggregated(
        self,
        request: web.Request,
        body: dict[str, Any],
        route: Route,
        prefill: Instance,
        flight: Flight,
    ) -> web.StreamResponse:
        decode = route.decode
        h = Handoff(
            self.settings.connector,
            route.group,
            os.urandom(16).hex(),
            Peer(prefill.zmq_address, prefill.dp_size, prefill.tp_size),
            Peer(decode.zmq_address, decode.dp_size, decode.tp_size),
            prefill.next_dp_rank(),
            decode.next_dp_rank(),
        )
        flight.request_id = h.request_id
        prefill_data = json.dumps(prefill_body(body, h))
        prefill_headers = leg_headers(h, "prefill")
        decode_headers = leg_headers(h, "decode")
        if route.group == "read":
            params = await self.relay.prefill(
                prefill, request.path, prefill_data, prefill_headers, flight
            )
            return await self.relay.pass_through(
                request,
                "decode",
                decode,
                json.dumps(decode_body(body, h, params)),
                decode_headers,
                flight,
            )
        # write mode: both legs at once; a prefill failing before the first decode byte reaches
        # the client cancels the decode leg and the client gets the prefill's 502.
        prefill_task = asyncio.create_task(
            self.relay.prefill(prefill, request.path, prefill_data, prefill_headers, flight)
        )
        relay_task = asyncio.create_task(
            self.relay.pass_through(
                request,
                "decode",
                decode,
                json.dumps(decode_body(body, h, None)),
                decode_headers,
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
            if prefill_task.done() and not prefill_task.cancelled() and prefill_task.exception():
                raise prefill_task.exception() from None  # type: ignore[misc]
            raise
        finally:
            prefill_task.remove_done_callback(on_prefill_done)
            if not prefill_task.done():
                prefill_task.cancel()
            await asyncio.gather(prefill_task, return_exceptions=True)

    def _finish(self, flight: Flight, outcome: str) -> None:
        self._judge_instances(flight, outcome)
        timing, met = flight.measure(outcome, self.settings.slo, clock())
        self.metrics.record(outcome, timing, met)
        if timing is not None and flight.route is not None:
            spikes, lined_up = self.interference.spikes(flight.route.decode.url, flight.token_times)
            self.metrics.itl_spikes += spikes
            self.metrics.itl_spikes_at_prefill += lined_up
        self.requests.append(flight.log_entry(outcome, timing, met))

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
                if self.pool.leg_failed(
                    inst, self.settings.eject_after, self.settings.eject_seconds, time.monotonic()
                ):
                    log.warning("ejected %s %s: %s", inst.role, inst.url, inst.last_error)
            elif outcome == "ok":
                self.pool.leg_ok(inst)


def _hung_up(flight: Flight) -> str:
    """The outcome of a request whose client hung up. A client that had everything up to
    [DONE] and left before the closing chunk (clients stop reading at [DONE]) was served."""
    if flight.done_at is not None:
        flight.end = flight.end or flight.done_at
        return "ok"
    flight.error = "client disconnected"
    return "cancelled"
