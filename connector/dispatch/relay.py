"""The legs' I/O on the request path: the prefill leg's POST, and the leg whose bytes pass
through to the client as they arrive, under the watchdog (connector/dispatch/watchdog.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
from aiohttp import web

from connector.dispatch.answers import Post
from connector.dispatch.flight import Flight, clock
from connector.dispatch.hangs import prompt_grace
from connector.dispatch.watchdog import PrefillWait, Watchdog
from connector.errors import (
    ConnectFailed,
    ProxyError,
    UpstreamError,
    UpstreamFault,
    UpstreamTimeout,
)
from connector.http.client_stream import (
    ChunkedOut,
    ClientAnswer,
    ClientGone,
    ClientRequest,
    fast_out,
    open_sse,
)
from connector.http.upstream import UpstreamPool
from connector.legs import chat_shape
from connector.legs.client_body import upstream_failure
from connector.legs.rewrite import returned_params
from connector.measure.interference import Interference
from connector.pool import pd_roles
from connector.pool.instances import Instance, InstancePool
from connector.settings import ProxySettings

__all__ = ["ClientGone", "Relay"]


class Relay:
    """Sends the legs over the proxy's one client; every error names the leg and its instance."""

    def __init__(
        self, settings: ProxySettings, pool: InstancePool, interference: Interference
    ) -> None:
        self.settings, self.pool, self.interference = settings, pool, interference
        # the proxy's session for what is not a leg (the render tier), set at its startup
        self.session: aiohttp.ClientSession | None = None
        self.upstream = UpstreamPool(settings.connect_timeout)  # the legs' client
        self.watchdog = Watchdog(settings, pool)  # over every leg in flight

    def client(self) -> aiohttp.ClientSession:
        """The proxy's session; it opens at the app's startup, and nothing is sent before."""
        if self.session is None:
            raise ProxyError("the proxy's client session is not open (the app has not started)")
        return self.session

    async def prefill(
        self, inst: Instance, path: str, data: bytes, headers: dict[str, str], flight: Flight
    ) -> dict[str, Any] | None:
        """The prefill leg; returns its kv_transfer_params. Errors name the prefill instance."""
        post = self._post(inst, path, data, headers, self.settings.prefill_timeout)
        flight.prefill_start = clock()
        task = asyncio.current_task()
        wait = PrefillWait(inst, flight.prefill_start, prompt_grace(flight.estimate[0]))
        if task is not None:  # watched for a hang (`hung`) until it answers
            self.watchdog.prefills[task] = wait
        try:
            async with post as r:
                inst.moved_at = max(inst.moved_at, clock())  # it answered
                raw = await r.read()
                if r.status != 200:
                    raise upstream_failure("prefill", inst.url, r.status, raw)
        except asyncio.CancelledError:
            if task is None or not wait.hung:
                raise
            task.uncancel()  # the watchdog's: the instance is hung
            first = self.settings.first_byte_timeout
            raise UpstreamTimeout("prefill", inst.url, first, "first_byte") from None
        except TimeoutError:
            raise UpstreamTimeout("prefill", inst.url, self.settings.prefill_timeout) from None
        except UpstreamFault as exc:
            self._passive_unhealthy(inst, exc)
            detail = f"{type(exc).__name__}: {exc}"
            raise UpstreamError("prefill", inst.url, detail, exc.cause) from None
        finally:
            if task is not None:
                self.watchdog.prefills.pop(task, None)
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict):
            raise UpstreamError(
                "prefill",
                inst.url,
                f"answered 200 with a body that is not a JSON object: {raw[:60]!r}",
                "garbage",
            )
        flight.prefill_end = clock()
        return returned_params(answer)

    def _post(
        self, inst: Instance, path: str, data: bytes, headers: dict[str, str], total: float | None
    ) -> Post:
        """One leg's POST; `total` bounds the whole leg (None: the watchdog's, streaming)."""
        headers = {**headers, **pd_roles.headers(inst)}
        return Post(self.upstream, inst.url, path, data, headers, total)

    def _passive_unhealthy(self, inst: Instance, exc: UpstreamFault) -> None:
        if isinstance(exc, ConnectFailed):
            inst.refused_at = clock()  # what it prefilled before is gone with it (`hung`)
        # Only when active checks run, or the instance could never come back.
        if self.settings.health_interval and isinstance(exc, ConnectFailed):
            self.pool.set_health(inst, False, f"{type(exc).__name__}: {exc}")

    async def pass_through(
        self,
        request: ClientRequest,
        leg: str,
        inst: Instance,
        data: bytes,
        headers: dict[str, str],
        flight: Flight,
        prefill_task: asyncio.Task | None = None,
    ) -> ClientAnswer:
        """Send the streaming leg and pass its bytes through to the client as they arrive."""
        post = self._post(inst, flight.leg_path or request.path, data, headers, None)
        # a chat answer from completion legs (connector/legs/chat_shape.py)
        reshape = flight.reshape
        resp: ClientAnswer | None = None
        out: ChunkedOut | None = None  # the fast path to the client, once its head is out
        task = asyncio.current_task()
        if task is None:  # aiohttp runs each handler in a task; the watchdog cancels that task
            raise ProxyError("a streaming leg runs only inside a task")
        flight.last_read = clock()
        self.watchdog.streams[task] = (flight, inst)
        heard = 0.0  # when the instance answered this leg's head
        try:
            async with post as up:
                heard = clock()
                if up.status != 200:
                    raise upstream_failure(leg, inst.url, up.status, await up.read())
                if not flight.stream:
                    raw = await up.read()
                    flight.end = clock()
                    if not _read_json_usage(raw, flight):
                        raise UpstreamError(
                            leg,
                            inst.url,
                            f"answered 200 with a body that is not a JSON object: {raw[:60]!r}",
                            "garbage",
                        )
                    return web.Response(
                        body=raw if reshape is None else chat_shape.whole(raw),
                        status=200,
                        headers={"Content-Type": up.header("Content-Type", "application/json")},
                    )
                kind = up.header("Content-Type")
                if not kind.startswith("text/event-stream"):
                    raise UpstreamError(
                        leg,
                        inst.url,
                        "answered a streaming request with "
                        f"Content-Type {kind[:60]!r}, not an event stream",
                        "garbage",
                    )
                scan, read = flight.scan, up.read_some
                while out is None and (chunk := await read()):
                    flight.last_read = now = clock()
                    if reshape is not None:  # whole chat events, scanned as the client gets them
                        chunk = reshape.chunk(chunk)
                    scan(chunk, now)
                    if flight.malformed is not None:  # garbage is never passed on
                        break
                    if resp is None:
                        if prefill_task is not None and prefill_task.done():
                            _raise_if_failed(prefill_task)
                        if not flight.token_times and _error_event(chunk):
                            # an engine's failure (a KV load that failed) before any token:
                            # nothing reached the client, so the request may go elsewhere
                            raise UpstreamError(
                                leg,
                                inst.url,
                                f"answered with an error before any token: {chunk[6:200]!r}",
                                "status",
                            )
                        if flight.route is not None and flight.route.prefill is None:
                            self.interference.prefill_done(inst.url, now)  # it prefilled here
                        flight.prepared = True
                        resp = await open_sse(request)
                    try:
                        await resp.write(chunk)
                    except ConnectionError:  # the client's socket, not the upstream's
                        raise ClientGone from None
                    if reshape is None:  # reshaped bytes keep to this loop
                        out = fast_out(request, resp)
                if out is not None and flight.malformed is None:
                    await up.stream(flight, out)  # the rest, straight to the client
                if flight.malformed is not None:
                    garbage = UpstreamError(
                        leg,
                        inst.url,
                        f"sent an event that is not JSON: {flight.malformed[:60]!r}",
                        "garbage",
                    )
                    if resp is None:
                        raise garbage
                    await _stream_error(resp, garbage, flight)
                    return resp
                flight.end = clock()
        except asyncio.CancelledError:
            if not flight.timed_out:
                raise
            task.uncancel()  # the watchdog's cancel, not the client's: answer with a timeout
            if flight.kv_lost is not None and resp is None:
                raise UpstreamError(
                    "prefill",
                    flight.kv_lost,
                    "refused a connection before the decode leg to "
                    f"{inst.url} sent a byte: the KV it held for this request is gone",
                    "kv_lost",
                ) from None
            exc: ProxyError = (
                UpstreamTimeout(leg, inst.url, self.settings.first_byte_timeout, "first_byte")
                if flight.first_byte_missed
                else UpstreamTimeout(leg, inst.url, self.settings.decode_timeout)
            )
            starved = prefill_task is not None and not prefill_task.done()
            if resp is None and not flight.first_byte_missed and starved:
                exc = self._prefill_starved(inst, flight)
            if resp is None:
                raise exc from None
            await _stream_error(resp, exc, flight)
            return resp
        except TimeoutError:
            exc = UpstreamTimeout(leg, inst.url, self.settings.decode_timeout)
            if resp is None:
                raise exc from None
            await _stream_error(resp, exc, flight)
            return resp
        except UpstreamFault as exc:
            self._passive_unhealthy(inst, exc)
            err = UpstreamError(
                leg,
                inst.url,
                f"{type(exc).__name__}: {exc}"
                if resp is None
                else f"failed mid-stream: {type(exc).__name__}",
                exc.cause,
            )
            if resp is None:
                raise err from None
            await _stream_error(resp, err, flight)
            return resp
        finally:
            self.watchdog.streams.pop(task, None)
            if heard:  # its last byte: the instance moved then (`hung`)
                inst.moved_at = max(inst.moved_at, heard, flight.last_read)
        if resp is None:  # a 200 with an empty stream: answer with an empty event stream
            flight.prepared = True
            resp = await open_sse(request)
        try:
            # the parts go out with the stream's last chunk: one write, no extra packet
            await resp.write_eof(flight.parts_comment(clock()) if flight.want_parts else b"")
        except ConnectionError:
            raise ClientGone from None
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


async def _stream_error(resp: ClientAnswer, exc: ProxyError, flight: Flight) -> None:
    """Headers are gone: the error travels as the stream's last event."""
    flight.status, flight.error = exc.status, exc.message
    if isinstance(exc, UpstreamError):
        flight.blamed, flight.cause = exc.instance, exc.cause
    with contextlib.suppress(ConnectionError):
        await resp.write(b"data: " + exc.body_bytes() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()


def _read_json_usage(raw: bytes, flight: Flight) -> bool:
    """Read the usage of a whole answer; False when the answer is not a JSON object."""
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    if not isinstance(answer, dict):
        return False
    flight.kv_stats = answer.get("kv_transfer_stats")
    if flight.answer is not None:  # bidirectional KV: the answer keys the next turn
        flight.collect(answer)
    flight.read_usage(answer.get("usage"))
    return True


def _error_event(chunk: bytes) -> bool:
    """The stream opens with an error event (`data: {"error": ...}`), as vLLM streams a
    failure; looked at on the first piece only."""
    head = chunk[:16].replace(b" ", b"")
    return head.startswith(b'data:{"error"')


def _raise_if_failed(task: asyncio.Task) -> None:
    if not task.cancelled() and (failed := task.exception()) is not None:
        raise failed
