"""The PD proxy: an aiohttp app that splits each request into a prefill and a decode leg (or
balances whole requests over a colocated group), streams the decode's bytes through as they come,
and measures every request as the client sees it.

Kept cheap on purpose: one long-lived ClientSession; decode SSE bytes are forwarded untouched and
only scanned for event boundaries, `"choices":[{` (a token event) and the usage chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from connector.client_body import (
    estimate_tokens,
    parse_client_body,
    turn_kind,
    upstream_failure,
    upstream_message,
)
from connector.errors import (
    BadRequest,
    HoldRejected,
    NoInstance,
    ProxyError,
    TooLarge,
    Unavailable,
    UpstreamError,
    UpstreamTimeout,
)
from connector.flight import Flight
from connector.instances import Instance, InstancePool, Route
from connector.interference import Interference
from connector.legs import Handoff, Peer, decode_body, leg_headers, prefill_body, returned_params
from connector.membership import Membership
from connector.metrics import ProxyMetrics, make_registry
from connector.policy import make_policy
from connector.settings import ProxySettings

log = logging.getLogger(__name__)

PROXY_KEY: web.AppKey[Proxy] = web.AppKey("proxy")
RUNNER_KWARGS: dict[str, Any] = {"handler_cancellation": True, "access_log": None}

_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


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
        self.pool.on_change = self._notify
        self._changed = asyncio.Event()
        self.metrics = ProxyMetrics()
        self.interference = Interference()
        self.registry = make_registry(self.metrics, self.pool)
        self.requests: deque[dict[str, Any]] = deque(maxlen=settings.request_log_size)
        self.membership = Membership(settings, self.pool, self.metrics)
        self.session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []
        self._warm_until = 0.0  # loop time until which an empty pool waits (startup grace)
        # streaming legs under the silence watchdog (cheaper than aiohttp's per-read timer)
        self._watched: dict[asyncio.Task, Flight] = {}
        self._prefill_timeout = aiohttp.ClientTimeout(
            total=settings.prefill_timeout, sock_connect=settings.connect_timeout
        )
        self._decode_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=settings.connect_timeout
        )
        for flag in settings.prefill:
            self.pool.upsert(flag.url, "prefill", settings.mode, zmq_address=flag.zmq_address)
        for flag in settings.decode:
            self.pool.upsert(flag.url, "decode", settings.mode, zmq_address=flag.zmq_address)
        for flag in settings.instance:
            self.pool.upsert(flag.url, "both", "colocated")

    @property
    def registry_port(self) -> int | None:
        return self.membership.port

    # -- lifecycle ---------------------------------------------------------------------------
    async def startup(self, app: web.Application) -> None:
        self._changed = asyncio.Event()
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=None),
        )
        self.membership.start(self.session)
        if self.settings.registry_port is not None:
            self._warm_until = asyncio.get_running_loop().time() + self.settings.startup_grace
        self._tasks.append(asyncio.create_task(self._watch_loop_lag()))
        self._tasks.append(asyncio.create_task(self._watch_silence()))

    async def cleanup(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.membership.stop()
        if self.session is not None:
            await self.session.close()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _watch_loop_lag(self) -> None:
        loop, interval = asyncio.get_running_loop(), self.settings.loop_lag_interval
        while True:
            start = loop.time()
            await asyncio.sleep(interval)
            self.metrics.loop_lag = max(0.0, loop.time() - start - interval)

    async def _watch_silence(self) -> None:
        """Cancel streaming legs whose upstream has been silent past --decode-timeout."""
        limit = self.settings.decode_timeout
        period = min(1.0, limit / 4)
        while True:
            await asyncio.sleep(period)
            now = _clock()
            for task, flight in list(self._watched.items()):
                if now - flight.last_read > limit and not flight.timed_out:
                    flight.timed_out = True
                    task.cancel()

    async def _read_body(self, request: web.Request) -> bytes:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise TooLarge(f"request body larger than {self.settings.max_body_bytes} bytes "
                           "(the proxy's --max-body-bytes)") from None

    # -- routing -----------------------------------------------------------------------------
    async def acquire_route(self) -> Route:
        """A route now; or, while a group is paused or the proxy is just starting, wait in
        the bounded hold queue."""
        route = self.pool.route()
        if route is not None:
            return route
        s = self.settings
        if self._warming():
            return await self._hold(
                self._warm_until, self._warming,
                f"no instance became routable within the proxy's first {s.startup_grace:g} s "
                "(--startup-grace)")
        if not self.pool.any_paused():
            raise NoInstance(f"no instance can serve this request: {self.pool.why_unroutable()}")
        return await self._hold(
            asyncio.get_running_loop().time() + s.hold_deadline, self.pool.any_paused,
            f"dispatch stayed paused past the hold deadline ({s.hold_deadline:g} s)")

    def _warming(self) -> bool:
        """Just started with a registry: instances come back with their next heartbeat and
        are routed to once their /health answers."""
        return asyncio.get_running_loop().time() < self._warm_until

    async def _hold(self, deadline: float, still_waiting: Callable[[], bool],
                    expired: str) -> Route:
        """Wait for a route while `still_waiting()` and before `deadline` (loop time)."""
        s, m = self.settings, self.metrics
        if m.held >= s.hold_queue:
            raise HoldRejected(
                f"dispatch is paused and the hold queue is full ({s.hold_queue} requests)",
                retry_after=s.hold_deadline,
            )
        loop = asyncio.get_running_loop()
        m.held += 1
        try:
            while (remaining := deadline - loop.time()) > 0:
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
                route = self.pool.route()
                if route is not None:
                    return route
                if not still_waiting():
                    break
        finally:
            m.held -= 1
        route = self.pool.route()
        if route is not None:
            return route
        if self.pool.any_paused() or still_waiting():
            raise HoldRejected(expired, retry_after=s.hold_deadline)
        raise NoInstance(f"no instance can serve this request: {self.pool.why_unroutable()}")

    # -- the request path --------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        flight = Flight(_clock(), request.path)
        outcome = "failed"
        try:
            body = parse_client_body(await self._read_body(request), request.path)
            flight.stream = body.get("stream") is True
            self.metrics.turns[turn_kind(body, request.path)] += 1
            route = await self.acquire_route()
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
        except _ClientGone:
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
                response = await self._relay(
                    request, "colocated", decode, json.dumps(body), headers, flight
                )
            else:
                response = await self._disaggregated(request, body, route, flight)
            ok = flight.error is None
            return response
        finally:
            self.metrics.in_flight -= 1
            decode.end(decode_load, ok)
            if prefill is not None:
                prefill.end(prompt_tokens, ok or flight.prefill_end is not None)

    async def _disaggregated(
        self, request: web.Request, body: dict[str, Any], route: Route, flight: Flight
    ) -> web.StreamResponse:
        prefill, decode = route.prefill, route.decode
        assert prefill is not None
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
            params = await self._prefill(
                prefill, request.path, prefill_data, prefill_headers, flight
            )
            return await self._relay(
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
            self._prefill(prefill, request.path, prefill_data, prefill_headers, flight)
        )
        relay_task = asyncio.create_task(
            self._relay(
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

    async def _prefill(
        self, inst: Instance, path: str, data: str, headers: dict[str, str], flight: Flight
    ) -> dict[str, Any] | None:
        """The prefill leg; returns its kv_transfer_params. Errors name the prefill instance."""
        assert self.session is not None
        flight.prefill_start = _clock()
        try:
            async with self.session.post(
                inst.url + path, data=data, headers=headers, timeout=self._prefill_timeout
            ) as r:
                raw = await r.read()
                if r.status != 200:
                    raise upstream_failure("prefill", inst.url, r.status, raw)
        except TimeoutError:
            raise UpstreamTimeout("prefill", inst.url, self.settings.prefill_timeout) from None
        except aiohttp.ClientError as exc:
            self._passive_unhealthy(inst, exc)
            raise UpstreamError("prefill", inst.url, f"{type(exc).__name__}: {exc}") from None
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            raise UpstreamError("prefill", inst.url, "answered 200 with a body that is not a "
                                f"JSON object: {raw[:60]!r}")
        flight.prefill_end = _clock()
        return returned_params(answer)

    def _passive_unhealthy(self, inst: Instance, exc: Exception) -> None:
        # Only when active checks run, or the instance could never come back.
        if self.settings.health_interval and isinstance(exc, aiohttp.ClientConnectorError):
            self.pool.set_health(inst, False, f"{type(exc).__name__}: {exc}")

    async def _relay(
        self,
        request: web.Request,
        leg: str,
        inst: Instance,
        data: str,
        headers: dict[str, str],
        flight: Flight,
        prefill_task: asyncio.Task | None = None,
    ) -> web.StreamResponse:
        """Send the streaming leg and pass its bytes through to the client as they arrive."""
        assert self.session is not None
        resp: web.StreamResponse | None = None
        task = asyncio.current_task()
        assert task is not None
        flight.last_read = _clock()
        self._watched[task] = flight
        try:
            async with self.session.post(
                inst.url + request.path, data=data, headers=headers, timeout=self._decode_timeout
            ) as up:
                if up.status != 200:
                    raise upstream_failure(leg, inst.url, up.status, await up.read())
                if not flight.stream:
                    raw = await up.read()
                    flight.end = _clock()
                    if not self._read_json_usage(raw, flight):
                        raise UpstreamError(leg, inst.url, "answered 200 with a body that is "
                                            f"not a JSON object: {raw[:60]!r}")
                    return web.Response(
                        body=raw,
                        status=200,
                        headers={
                            "Content-Type": up.headers.get("Content-Type", "application/json")
                        },
                    )
                kind = up.headers.get("Content-Type", "")
                if not kind.startswith("text/event-stream"):
                    raise UpstreamError(leg, inst.url, "answered a streaming request with "
                                        f"Content-Type {kind[:60]!r}, not an event stream")
                scan, read = flight.scan, up.content.readany
                while chunk := await read():
                    flight.last_read = now = _clock()
                    scan(chunk, now)
                    if flight.malformed is not None:  # garbage is never passed on
                        garbage = UpstreamError(leg, inst.url, "sent an event that is not "
                                                f"JSON: {flight.malformed[:60]!r}")
                        if resp is None:
                            raise garbage
                        await self._stream_error(resp, garbage, flight)
                        return resp
                    if resp is None:
                        if prefill_task is not None and prefill_task.done():
                            _raise_if_failed(prefill_task)
                        if flight.route is not None and flight.route.prefill is None:
                            self.interference.prefill_done(inst.url, now)  # it prefilled here
                        resp = web.StreamResponse(headers=_SSE_HEADERS)
                        flight.prepared = True
                        await resp.prepare(request)
                    try:
                        await resp.write(chunk)
                    except ConnectionError:  # the client's socket, not the upstream's
                        raise _ClientGone from None
                flight.end = _clock()
        except asyncio.CancelledError:
            if not flight.timed_out:
                raise
            task.uncancel()  # the watchdog's cancel, not the client's: answer with a timeout
            exc: ProxyError = UpstreamTimeout(leg, inst.url, self.settings.decode_timeout)
            if resp is None and prefill_task is not None and not prefill_task.done():
                exc = self._prefill_starved(inst, flight)
            if resp is None:
                raise exc from None
            await self._stream_error(resp, exc, flight)
            return resp
        except TimeoutError:
            exc = UpstreamTimeout(leg, inst.url, self.settings.decode_timeout)
            if resp is None:
                raise exc from None
            await self._stream_error(resp, exc, flight)
            return resp
        except aiohttp.ClientError as exc:
            self._passive_unhealthy(inst, exc)
            err = UpstreamError(
                leg,
                inst.url,
                f"{type(exc).__name__}: {exc}"
                if resp is None
                else f"failed mid-stream: {type(exc).__name__}",
            )
            if resp is None:
                raise err from None
            await self._stream_error(resp, err, flight)
            return resp
        finally:
            self._watched.pop(task, None)
        if resp is None:  # a 200 with an empty stream: answer with an empty event stream
            resp = web.StreamResponse(headers=_SSE_HEADERS)
            flight.prepared = True
            await resp.prepare(request)
        try:
            await resp.write_eof()
        except ConnectionError:
            raise _ClientGone from None
        return resp

    def _prefill_starved(self, decode: Instance, flight: Flight) -> ProxyError:
        """Write mode: a decode silent while its prefill has not answered is waiting for the
        KV the prefill pushes; the prefill is what failed, so the error names it."""
        prefill = flight.route.prefill if flight.route is not None else None
        if prefill is None:
            return UpstreamTimeout("decode", decode.url, self.settings.decode_timeout)
        return UpstreamError(
            "prefill",
            prefill.url,
            f"no answer within {self.settings.decode_timeout:g} s while the decode leg to "
            f"{decode.url} waited for its KV",
        )

    async def _stream_error(
        self, resp: web.StreamResponse, exc: ProxyError, flight: Flight
    ) -> None:
        flight.status, flight.error = exc.status, exc.message
        if isinstance(exc, UpstreamError):
            flight.blamed = exc.instance
        with contextlib.suppress(ConnectionError):
            await resp.write(b"data: " + exc.body_bytes() + b"\n\ndata: [DONE]\n\n")
            await resp.write_eof()

    @staticmethod
    def _read_json_usage(raw: bytes, flight: Flight) -> bool:
        """Read the usage of a whole answer; False when the answer is not a JSON object."""
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            return False
        if not isinstance(answer, dict):
            return False
        usage = answer.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            flight.usage_tokens = usage["completion_tokens"]
        return True

    def _finish(self, flight: Flight, outcome: str) -> None:
        self._judge_instances(flight, outcome)
        timing, met = flight.measure(outcome, self.settings.slo, _clock())
        self.metrics.record(outcome, timing, met)
        if timing is not None and flight.route is not None:
            spikes, lined_up = self.interference.spikes(flight.route.decode.url,
                                                        flight.token_times)
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
                if self.pool.leg_failed(inst, self.settings.eject_after,
                                        self.settings.eject_seconds, time.monotonic()):
                    log.warning("ejected %s %s: %s", inst.role, inst.url, inst.last_error)
            elif outcome == "ok":
                self.pool.leg_ok(inst)

    # -- other routes ------------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        assert self.session is not None
        candidates = [i for i in self.pool if i.available and i.role != "prefill"]
        candidates += [i for i in self.pool if i.available and i.role == "prefill"]
        if not candidates:
            return error_response(NoInstance("no instance is available to list models"))
        inst = candidates[0]
        try:
            async with self.session.get(
                inst.url + "/v1/models", timeout=self._prefill_timeout
            ) as r:
                raw = await r.read()
                if r.status != 200:
                    raise UpstreamError(
                        "models", inst.url, f"HTTP {r.status}: {upstream_message(raw)}"
                    )
        except TimeoutError:
            return error_response(
                UpstreamTimeout("models", inst.url, self.settings.prefill_timeout)
            )
        except aiohttp.ClientError as exc:
            return error_response(UpstreamError("models", inst.url, type(exc).__name__))
        except UpstreamError as exc:
            return error_response(exc)
        return web.Response(body=raw, content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "status": "ok",
                "routable": self.pool.route_possible(),
                "groups": [g.describe() for g in self.pool.groups.values()],
            }
        )

    async def metrics_text(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


_clock = time.perf_counter  # uvloop's loop.time() has millisecond resolution: too coarse for ITL


class _ClientGone(Exception):
    """Writing to the client failed: it hung up (not an upstream failure)."""


def _hung_up(flight: Flight) -> str:
    """The outcome of a request whose client hung up. A client that had everything up to
    [DONE] and left before the closing chunk (clients stop reading at [DONE]) was served."""
    if flight.done_at is not None:
        flight.end = flight.end or flight.done_at
        return "ok"
    flight.error = "client disconnected"
    return "cancelled"


def _raise_if_failed(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
