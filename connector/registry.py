"""MoRIIO instance registration (PROTOCOL.md section 2): pure message parsing, a heartbeat table
that takes `now` as a parameter, and a thin ZMQ ROUTER listener that feeds both into the pool.

Two message shapes, both msgpack dicts sent by a DEALER every few seconds:
- newer: {"type": "P"|"D", "http_address": "ip:port", "zmq_address": "host:IP,handshake:P,notify:P",
  "dp_size", "tp_size", "transfer_mode": "READ"|"WRITE"}, every 3 s;
- older: {"type": "register", "role": "P"|"D", "index", "request_address":
  "http://ip:port/v1/completions", "handshake_port", "notify_port", "dp_size", "tp_size",
  "transfer_mode"}, every 5 s. {"type": "HELLO"} is ignored.
An instance silent for 3 of its heartbeat intervals is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

NEW_INTERVAL = 3.0
OLD_INTERVAL = 5.0
MISSED_BEATS = 3

_ROLES = {"P": "prefill", "D": "decode"}
_MODES = {"READ": "read", "WRITE": "write"}


class RegistryMessageError(ValueError):
    """A registration we cannot use; the message says which field."""


@dataclass(frozen=True, slots=True)
class Registration:
    role: str  # prefill | decode
    url: str  # http://ip:port
    zmq_address: str | None
    dp_size: int
    tp_size: int
    mode: str  # read | write
    interval: float  # seconds between heartbeats for this shape


def _int_field(data: dict, key: str, default: int = 1) -> int:
    value = data.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RegistryMessageError(f"field {key!r} is not an integer: {value!r}") from None


def _mode(data: dict, default_mode: str) -> str:
    raw = data.get("transfer_mode")
    if raw is None:
        return default_mode
    mode = _MODES.get(str(raw).upper())
    if mode is None:
        raise RegistryMessageError(f"field 'transfer_mode' must be READ or WRITE, got {raw!r}")
    return mode


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _host_port(url: str, field: str):
    """The URL's parts; it must be http(s)://host:port with nothing odd in the host."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port = None
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or not port
        or any(c in parts.hostname for c in " /\\@")
    ):
        raise RegistryMessageError(f"field {field!r} has no http://host:port: {url[:80]!r}")
    return parts


def parse_message(data: Any, default_mode: str = "read") -> Registration | None:
    """One registration from either shape; None for HELLO. Raises RegistryMessageError."""
    if not isinstance(data, dict):
        raise RegistryMessageError("registration is not a map")
    data = {_text(k): (_text(v) if isinstance(v, bytes) else v) for k, v in data.items()}
    kind = data.get("type")
    if kind == "HELLO":
        return None
    if kind in _ROLES:
        address = data.get("http_address")
        if not address or not isinstance(address, str):
            raise RegistryMessageError("field 'http_address' is missing or not a string")
        url = address if "://" in address else f"http://{address}"
        _host_port(url, "http_address")
        zmq_address = data.get("zmq_address") or None
        if zmq_address is not None and not isinstance(zmq_address, str):
            raise RegistryMessageError("field 'zmq_address' is not a string")
        return Registration(
            role=_ROLES[kind],
            url=url.rstrip("/"),
            zmq_address=zmq_address,
            dp_size=_int_field(data, "dp_size"),
            tp_size=_int_field(data, "tp_size"),
            mode=_mode(data, default_mode),
            interval=NEW_INTERVAL,
        )
    if kind == "register":
        role = _ROLES.get(data.get("role"))
        if role is None:
            raise RegistryMessageError(f"field 'role' must be P or D, got {data.get('role')!r}")
        address = data.get("request_address")
        if not address:
            raise RegistryMessageError("field 'request_address' is missing")
        parts = _host_port(str(address), "request_address")
        zmq = None
        if data.get("handshake_port") is not None and data.get("notify_port") is not None:
            handshake = _int_field(data, "handshake_port")
            notify = _int_field(data, "notify_port")
            zmq = f"host:{parts.hostname},handshake:{handshake},notify:{notify}"
        return Registration(
            role=role,
            url=f"{parts.scheme or 'http'}://{parts.hostname}:{parts.port}",
            zmq_address=zmq,
            dp_size=_int_field(data, "dp_size"),
            tp_size=_int_field(data, "tp_size"),
            mode=_mode(data, default_mode),
            interval=OLD_INTERVAL,
        )
    raise RegistryMessageError(f"field 'type' is not P, D, register or HELLO: {kind!r}")


@dataclass(slots=True)
class _Entry:
    registration: Registration
    last_seen: float


class RegistryTable:
    """Registered instances keyed by URL, with heartbeat expiry on a clock passed in."""

    def __init__(
        self,
        missed_beats: int = MISSED_BEATS,
        interval_scale: float = 1.0,
        max_instances: int = 256,
    ) -> None:
        self.missed_beats = missed_beats
        self.max_instances = max_instances  # a flood of made-up instances stops here
        self.interval_scale = interval_scale  # tests shrink the intervals
        self._entries: dict[str, _Entry] = {}

    def beat(self, reg: Registration, now: float) -> str:
        """Record a heartbeat; returns "added", "changed" (role/mode/ports moved), "refreshed",
        or "full" (a new instance while `max_instances` are registered: not recorded)."""
        entry = self._entries.get(reg.url)
        if entry is None:
            if len(self._entries) >= self.max_instances:
                return "full"
            self._entries[reg.url] = _Entry(reg, now)
            return "added"
        changed = entry.registration != reg
        entry.registration = reg
        entry.last_seen = now
        return "changed" if changed else "refreshed"

    def expire(self, now: float) -> list[Registration]:
        """Drop and return the instances silent for `missed_beats` of their intervals."""
        gone = [
            e.registration
            for e in self._entries.values()
            if now - e.last_seen
            >= self.missed_beats * e.registration.interval * self.interval_scale
        ]
        for reg in gone:
            del self._entries[reg.url]
        return gone

    def forget(self, url: str) -> None:
        self._entries.pop(url, None)

    def __contains__(self, url: str) -> bool:
        return url in self._entries

    def __len__(self) -> int:
        return len(self._entries)


class RegistryListener:
    """The shell: a zmq.asyncio ROUTER that parses messages and calls back on changes."""

    def __init__(
        self,
        host: str,
        port: int,
        table: RegistryTable,
        on_beat: Callable[[Registration, str], None],
        on_expire: Callable[[Registration], None],
        default_mode: str = "read",
        clock: Callable[[], float] | None = None,
        on_reject: Callable[[str, str], None] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.table = table
        self.on_beat, self.on_expire = on_beat, on_expire
        self.default_mode = default_mode
        self.clock = clock
        self.on_reject = on_reject or (
            lambda reason, detail: log.warning("ignored registration (%s): %s", reason, detail)
        )
        self._ctx: Any = None
        self._sock: Any = None
        self._tasks: list[asyncio.Task] = []

    def start(self) -> int:
        """Bind (port 0: a free one) and start; returns the bound port."""
        import zmq
        import zmq.asyncio

        self.clock = self.clock or asyncio.get_running_loop().time
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        bind_host = "*" if self.host in ("0.0.0.0", "") else self.host
        if self.port == 0:
            self.port = self._sock.bind_to_random_port(f"tcp://{bind_host}")
        else:
            self._sock.bind(f"tcp://{bind_host}:{self.port}")
        self._tasks = [asyncio.create_task(self._receive()), asyncio.create_task(self._sweep())]
        return self.port

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()

    def handle(self, payload: bytes) -> None:
        import msgpack

        try:
            reg = parse_message(msgpack.unpackb(payload, raw=False), self.default_mode)
        except (RegistryMessageError, ValueError, TypeError, msgpack.UnpackException) as exc:
            self.on_reject("malformed", str(exc)[:200])
            return
        if reg is None:
            return
        change = self.table.beat(reg, self.clock())
        if change == "full":
            self.on_reject(
                "full", f"{reg.url}: {self.table.max_instances} instances are registered already"
            )
            return
        self.on_beat(reg, change)

    async def _receive(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            if len(frames) >= 2:
                self.handle(frames[-1])

    async def _sweep(self) -> None:
        period = min(NEW_INTERVAL, OLD_INTERVAL) * self.table.interval_scale / 2
        while True:
            await asyncio.sleep(period)
            for reg in self.table.expire(self.clock()):
                log.info("instance %s silent for %d beats: dropped", reg.url, MISSED_BEATS)
                self.on_expire(reg)
