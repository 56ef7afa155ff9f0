"""The proxy's MoRIIO registry (PROTOCOL.md section 2): a heartbeat table that takes `now` as
a parameter, and a thin ZMQ ROUTER listener that parses each message and hands it on.

The listener is hardened against whoever reaches its port: a frame over `MAX_MESSAGE_BYTES`
or a message over `MAX_FRAMES` frames closes the sender's connection before more is read
(connector/registry/zmtp.py), msgpack is unpacked with bounded sizes, and the receiver
survives anything a handler raises (logged, counted).
What to believe is decided by the caller (connector/membership.py,
connector/registry/trust.py).
An instance silent for 3 of its heartbeat intervals is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack

from connector.registry.message import (
    MAX_FIELDS,
    MAX_MESSAGE_BYTES,
    MAX_TEXT,
    NEW_INTERVAL,
    OLD_INTERVAL,
    Registration,
    RegistryMessageError,
    parse_message,
)
from connector.registry.zmtp import ZmtpReceiver

__all__ = [
    "MAX_FRAMES",
    "MISSED_BEATS",
    "NEW_INTERVAL",
    "OLD_INTERVAL",
    "Registration",
    "RegistryListener",
    "RegistryMessageError",
    "RegistryTable",
    "parse_message",
    "unpack",
]

MAX_FRAMES = 4  # a DEALER's registration is one frame; a REQ's has its delimiter first
log = logging.getLogger(__name__)

MISSED_BEATS = 3


def unpack(payload: bytes) -> Any:
    """msgpack with every size bounded, so a hostile payload costs at most its own bytes."""
    if len(payload) > MAX_MESSAGE_BYTES:  # the socket drops these; a direct caller may not
        raise ValueError(f"message of {len(payload)} bytes, more than {MAX_MESSAGE_BYTES}")
    return msgpack.unpackb(
        payload,
        raw=False,
        max_str_len=MAX_TEXT * 4,
        max_bin_len=MAX_TEXT * 4,
        max_array_len=MAX_FIELDS,
        max_map_len=MAX_FIELDS,
        max_ext_len=0,
    )


@dataclass(slots=True)
class _Entry:
    registration: Registration
    last_seen: float
    changed_at: float


class RegistryTable:
    """Confirmed instances keyed by URL, with heartbeat expiry on a clock passed in."""

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

    def get(self, url: str) -> Registration | None:
        entry = self._entries.get(url)
        return entry.registration if entry else None

    def last_change(self, url: str) -> float | None:
        entry = self._entries.get(url)
        return entry.changed_at if entry else None

    def beat(self, reg: Registration, now: float) -> str:
        """Record a heartbeat; returns "added", "changed" (role/mode/ports moved), "refreshed",
        or "full" (a new instance while `max_instances` are registered: not recorded)."""
        entry = self._entries.get(reg.url)
        if entry is None:
            if len(self._entries) >= self.max_instances:
                return "full"
            self._entries[reg.url] = _Entry(reg, now, float("-inf"))  # no change yet
            return "added"
        changed = entry.registration != reg
        entry.registration, entry.last_seen = reg, now
        if changed:
            entry.changed_at = now
        return "changed" if changed else "refreshed"

    def expire(self, now: float) -> list[Registration]:
        """Drop and return the instances silent for `missed_beats` of their intervals."""
        gone = [
            e.registration
            for e in self._entries.values()
            if now - e.last_seen >= self.silence_limit(e.registration)
        ]
        for reg in gone:
            del self._entries[reg.url]
        return gone

    def silence_limit(self, reg: Registration) -> float:
        return self.missed_beats * reg.interval * self.interval_scale

    def forget(self, url: str) -> None:
        self._entries.pop(url, None)

    def registrations(self) -> list[Registration]:
        return [e.registration for e in self._entries.values()]

    def __contains__(self, url: str) -> bool:
        return url in self._entries

    def __len__(self) -> int:
        return len(self._entries)


class RegistryListener:
    """The shell: a ZMTP receiver (connector/registry/zmtp.py: ZMQ DEALERs connect to it as
    to a ROUTER) that parses messages and calls back with each registration and the
    sender's address. Nothing a sender does stops it; a message over MAX_FRAMES frames or a
    frame over MAX_MESSAGE_BYTES cuts its sender off."""

    def __init__(
        self,
        host: str,
        port: int,
        on_registration: Callable[[Registration, str | None], None],
        on_reject: Callable[[str, str], None],
        on_sweep: Callable[[], None],
        sweep_period: float,
        default_mode: str = "read",
    ) -> None:
        self.host, self.port = host, port
        self.on_registration, self.on_reject, self.on_sweep = on_registration, on_reject, on_sweep
        self.sweep_period = sweep_period
        self.default_mode = default_mode
        self._receiver: ZmtpReceiver | None = None
        self._tasks: list[asyncio.Task] = []

    def start(self) -> int:
        """Bind (port 0: a free one) and start; returns the bound port."""
        any_host = self.host in ("0.0.0.0", "", "*")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0" if any_host else self.host, self.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._receiver = ZmtpReceiver(self._message, self._refused, MAX_FRAMES, MAX_MESSAGE_BYTES)
        self._tasks = [
            asyncio.create_task(self._receiver.serve(sock)),
            asyncio.create_task(self._sweep()),
        ]
        return self.port

    async def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _message(self, frames: list[bytes], peer: str | None) -> None:
        try:
            self.handle(frames[-1], peer)
        except Exception:  # the loop must outlive any handler bug: log it, count it
            log.exception("registry: a registration handler failed; still listening")
            self.on_reject("error", "a registration handler failed (see the proxy log)")

    def _refused(self, reason: str, why: str, peer: str | None) -> None:
        self.on_reject(reason, f"{why} (from {peer or 'an unknown address'}); disconnected")

    def handle(self, payload: bytes, peer: str | None = None) -> None:
        """One message: parsed, then handed on; a malformed one is refused naming its field."""
        try:
            reg = parse_message(unpack(payload), self.default_mode)
        except RegistryMessageError as exc:
            self.on_reject("malformed", str(exc))
            return
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            self.on_reject("malformed", f"not a msgpack map: {type(exc).__name__}")
            return
        if reg is not None:
            self.on_registration(reg, peer)

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_period)
            try:
                self.on_sweep()
            except Exception:  # as above: expiry must keep running
                log.exception("registry: the expiry sweep failed; it runs again")
