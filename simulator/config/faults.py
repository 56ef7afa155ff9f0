"""Fault injection for the stand-in, for `make chaos`: an engine that misbehaves while it stays
up. Off unless `pdctl sim --enable-fault-injection` (or PDCTL_SIM_FAULT_INJECTION=1); then
`POST /_fault` sets one fault, `DELETE /_fault` clears it and `GET /_fault` shows it.

    {"fault": "garbage", "after_tokens": N}  generation answers 200 with bytes that are not
                                             JSON (a stream: after N good token events)
    {"fault": "stall", "after_tokens": N}    generation goes silent (a stream: after N token
                                             events) until the client gives up
    {"fault": "silent"}                      registration heartbeats stop; it keeps serving
    {"fault": "mode", "mode": "read|write"}  heartbeats announce that transfer mode
    {"fault": "recompute"}                   a decode ignores the KV it is offered and
                                             computes the prompt itself (local_compute, at
                                             prefill cost), answering 200 as a real engine
                                             whose KV never arrives does
    {"fault": "corrupt_kv"}                  a prefill flips a byte of every KV payload it
                                             sends (read: pulled, write: pushed); the decode
                                             answers 200 with other tokens, since its output
                                             is seeded by the bytes it received
    {"fault": "slow_health", "seconds": S}   `/health` answers after S seconds while
                                             generation serves as before: a loaded engine's
                                             API server, busy, not dead (issue 39)

Beyond slow_health, `/health`, `/metrics` and `/v1/models` are never touched: the point is an
instance that looks alive and still answers wrongly.

One mechanism for every fault: a kind is one entry in KINDS naming the surface it acts on
(`requests`: generation answers; `heartbeat`: registrations; `health`: /health; `kv`: the KV
hand-off's bytes, read by simulator/kv/transfer.py through `Faults.for_kv()`), plus its effect
where that surface is served.
What a decode does with a restarted prefill's stale agent is a model setting, not a fault
(`--kv-stale-peer`, simulator/kv/peers.py).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from aiohttp import web

from domain.modes import TRANSFER_MODES
from simulator.protocol.format import ResponseWriter

KINDS = {
    "garbage": "requests",
    "stall": "requests",
    "silent": "heartbeat",
    "mode": "heartbeat",
    "recompute": "kv",
    "corrupt_kv": "kv",
    "slow_health": "health",
}
GARBAGE = b"\x8f\x00<html>upstream exploded</html> \xff\xfe not json at all"
STALL_S = 3600.0  # a stall outlives any sane client timeout; the client's hang-up ends it


class FaultError(ValueError):
    """A /_fault body we cannot use; the message names the field."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    after_tokens: int = 0
    mode: str | None = None  # "mode" only: read | write
    seconds: float = 0.0  # "slow_health" only: how late /health answers

    @property
    def surface(self) -> str:
        return KINDS[self.kind]

    def describe(self) -> dict:
        described = {"fault": self.kind, "after_tokens": self.after_tokens, "mode": self.mode}
        return described | ({"seconds": self.seconds} if self.kind == "slow_health" else {})


def parse_fault(body: object) -> Fault:
    """The fault a POST /_fault body asks for. Raises FaultError naming the field."""
    if not isinstance(body, dict):
        raise FaultError("body must be a JSON object")
    kind = body.get("fault")
    if kind not in KINDS:
        raise FaultError(f"field 'fault' must be one of {', '.join(KINDS)}; got {kind!r}")
    after = body.get("after_tokens", 0)
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= 100_000:
        raise FaultError("field 'after_tokens' must be an integer from 0 to 100000")
    mode = body.get("mode")
    if kind == "mode" and mode not in TRANSFER_MODES:
        raise FaultError(f"field 'mode' must be read or write; got {mode!r}")
    seconds = body.get("seconds", 0.0)
    if kind == "slow_health" and (
        not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 < seconds <= 600
    ):
        raise FaultError("field 'seconds' must be a number above 0 and at most 600")
    return Fault(kind, after, mode if kind == "mode" else None, float(seconds))


class Faults:
    """The one fault in force (or none), shared by the request handlers and the heartbeat."""

    def __init__(self) -> None:
        self.current: Fault | None = None

    def on(self, surface: str) -> Fault | None:
        """The fault in force on `surface` (requests | heartbeat | health | kv), if any."""
        fault = self.current
        return fault if fault is not None and fault.surface == surface else None

    def for_requests(self) -> Fault | None:
        return self.on("requests")

    def for_kv(self) -> Fault | None:
        return self.on("kv")

    async def before_health(self) -> None:
        """Hold a /health answer while the "slow_health" fault is in force."""
        fault = self.on("health")
        if fault is not None:
            await asyncio.sleep(fault.seconds)

    def heartbeat(self, message: dict) -> dict | None:
        """The registration to send this beat; None: skip it (the "silent" fault)."""
        fault = self.current
        if fault is None:
            return message
        if fault.kind == "silent":
            return None
        if fault.kind == "mode" and fault.mode:
            return {**message, "transfer_mode": fault.mode.upper()}
        return message


def kv_fault(faults: Faults | None) -> str | None:
    """The kind of the `kv` fault in force (recompute | corrupt_kv), if any."""
    fault = faults.for_kv() if faults is not None else None
    return fault.kind if fault is not None else None


FAULTS = web.AppKey("faults", Faults)


def add_routes(app: web.Application, faults: Faults) -> None:
    app[FAULTS] = faults
    app.router.add_get("/_fault", _show)
    app.router.add_post("/_fault", _set)
    app.router.add_delete("/_fault", _clear)


def _describe(faults: Faults) -> web.Response:
    current = faults.current
    return web.json_response({"fault": None} if current is None else current.describe())


async def _show(request: web.Request) -> web.Response:
    return _describe(request.app[FAULTS])


async def _set(request: web.Request) -> web.Response:
    faults = request.app[FAULTS]
    try:
        faults.current = parse_fault(json.loads(await request.read() or b"null"))
    except (ValueError, RecursionError) as exc:
        message = str(exc) if isinstance(exc, FaultError) else "body is not valid JSON"
        return web.json_response(
            {"error": {"message": message, "type": "BadRequestError", "code": 400}}, status=400
        )
    return _describe(faults)


async def _clear(request: web.Request) -> web.Response:
    faults = request.app[FAULTS]
    faults.current = None
    return _describe(faults)


async def answer(
    request: web.Request, fault: Fault, stream: bool, writer: ResponseWriter
) -> web.StreamResponse:
    """A generation request under a fault: 200, then garbage or silence. A stream first sends
    `after_tokens` well-formed token events, so the fault lands mid-stream."""
    if not stream:
        if fault.kind == "stall":
            await asyncio.sleep(STALL_S)
        return web.Response(body=GARBAGE, status=200, content_type="application/json")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
    await response.prepare(request)
    for _ in range(fault.after_tokens):
        await response.write(writer.token_chunk(" tok"))
    if fault.kind == "stall":
        await asyncio.sleep(STALL_S)
    await response.write(b"data: " + GARBAGE + b"\n\n")
    await response.write_eof()
    return response
