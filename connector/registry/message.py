"""One MoRIIO registration message (PROTOCOL.md section 2), checked field by field. Pure.

Two shapes, both msgpack maps sent by a DEALER every few seconds:
- newer: {"type": "P"|"D", "http_address": "ip:port", "zmq_address": "host:IP,handshake:P,notify:P",
  "dp_size", "tp_size", "transfer_mode": "READ"|"WRITE"}, every 3 s;
- older: {"type": "register", "role": "P"|"D", "index", "request_address":
  "http://ip:port/v1/completions", "handshake_port", "notify_port", "dp_size", "tp_size",
  "transfer_mode"}, every 5 s. {"type": "HELLO"} is ignored.

Anyone who reaches the registry port can send one, so nothing is trusted: every number is an
integer in range (never a float, inf or a 2^64 port), every address is a plain host and port
(no userinfo, path tricks or control characters), and the map itself is small.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from domain.modes import TRANSFER_MODES, Role

NEW_INTERVAL = 3.0
OLD_INTERVAL = 5.0

MAX_MESSAGE_BYTES = 16 << 10  # a real registration is ~250 bytes; the socket drops larger
MAX_FIELDS = 32
MAX_TEXT = 256  # longest address or mode string
MAX_PARALLEL = 1024  # dp_size and tp_size above this are no real deployment

# keyed by object: a message field of any type is looked up, and is no role unless a key
_ROLES: dict[object, Role] = {"P": Role.PREFILL, "D": Role.DECODE}
_MODES = {m.value.upper(): m for m in TRANSFER_MODES}
# A hostname or an IPv4/IPv6 literal: no userinfo, no path, no spaces, no percent escapes.
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")
_ZMQ = re.compile(
    r"^host:(?P<host>[^,]+),handshake:(?P<handshake>\d{1,5}),notify:(?P<notify>\d{1,5})$"
)
_OLD_PATHS = ("", "/", "/v1/completions", "/v1/chat/completions")


class RegistryMessageError(ValueError):
    """A registration we cannot use; `field` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"field {field!r} {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Registration:
    role: str  # prefill | decode
    url: str  # http://host:port
    zmq_address: str | None  # host:IP,handshake:P,notify:P
    dp_size: int
    tp_size: int
    mode: str  # read | write
    interval: float  # seconds between heartbeats for this shape

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    def differs_from(self, other: Registration) -> str | None:
        """The first field in which `other` claims something else about this instance."""
        for name in ("role", "mode", "zmq_address", "tp_size", "dp_size"):
            if getattr(self, name) != getattr(other, name):
                return name
        return None


def parse_message(data: Any, default_mode: str = "read") -> Registration | None:
    """One registration from either shape; None for HELLO. Raises RegistryMessageError."""
    data = _plain_map(data)
    kind = data.get("type")
    if kind == "HELLO":
        return None
    if kind in _ROLES:
        return _newer(data, _ROLES[kind], default_mode)
    if kind == "register":
        return _older(data, default_mode)
    raise RegistryMessageError("type", f"is not P, D, register or HELLO: {_show(kind)}")


def _newer(data: dict[str, Any], role: str, default_mode: str) -> Registration:
    address = _text(data, "http_address")
    if address is None:
        raise RegistryMessageError("http_address", "is missing")
    host, port = _host_port(address if "://" in address else f"http://{address}", "http_address")
    zmq = _text(data, "zmq_address")
    return Registration(
        role=role,
        url=f"http://{host}:{port}",
        zmq_address=_zmq_address(zmq) if zmq else None,
        dp_size=_count(data, "dp_size"),
        tp_size=_count(data, "tp_size"),
        mode=_mode(data, default_mode),
        interval=NEW_INTERVAL,
    )


def _older(data: dict[str, Any], default_mode: str) -> Registration:
    role = _ROLES.get(data.get("role"))
    if role is None:
        raise RegistryMessageError("role", f"must be P or D, got {_show(data.get('role'))}")
    address = _text(data, "request_address")
    if address is None:
        raise RegistryMessageError("request_address", "is missing")
    host, port = _host_port(address, "request_address", _OLD_PATHS)
    zmq = None
    if data.get("handshake_port") is not None and data.get("notify_port") is not None:
        handshake = _port(data.get("handshake_port"), "handshake_port")
        notify = _port(data.get("notify_port"), "notify_port")
        zmq = f"host:{host},handshake:{handshake},notify:{notify}"
    return Registration(
        role=role,
        url=f"http://{host}:{port}",
        zmq_address=zmq,
        dp_size=_count(data, "dp_size"),
        tp_size=_count(data, "tp_size"),
        mode=_mode(data, default_mode),
        interval=OLD_INTERVAL,
    )


def _plain_map(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RegistryMessageError("message", "is not a map")
    if len(data) > MAX_FIELDS:
        raise RegistryMessageError("message", f"has {len(data)} fields, more than {MAX_FIELDS}")
    plain: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(key, bytes):
            key = key.decode("utf-8", "replace")
        if not isinstance(key, str):
            raise RegistryMessageError("message", f"has a key that is not text: {_show(key)}")
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        plain[key] = value
    return plain


def _text(data: dict[str, Any], field: str) -> str | None:
    value = data.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RegistryMessageError(field, f"is not a string: {_show(value)}")
    if len(value) > MAX_TEXT or not value.isprintable():
        raise RegistryMessageError(field, f"is not a plain address: {_show(value)}")
    return value


def _host_port(url: str, field: str, paths: tuple[str, ...] = ("", "/")) -> tuple[str, int]:
    """http(s)://host:port, nothing more (an older request_address may end in its route)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise RegistryMessageError(field, f"has no valid http://host:port: {_show(url)}") from None
    host = parts.netloc.rsplit(":", 1)[0] if parts.netloc else ""
    if (
        parts.scheme not in ("http", "https")
        or "@" in parts.netloc
        or not _HOST.match(host)
        or not port
        or parts.path not in paths
        or parts.query
        or parts.fragment
    ):
        raise RegistryMessageError(field, f"has no valid http://host:port: {_show(url)}")
    return host.lower(), port


def _zmq_address(text: str) -> str:
    match = _ZMQ.match(text.strip())
    if match is None or not _HOST.match(match["host"]):
        raise RegistryMessageError(
            "zmq_address", f"is not host:IP,handshake:PORT,notify:PORT: {_show(text)}"
        )
    for part in ("handshake", "notify"):
        if int(match[part]) > 65535:
            raise RegistryMessageError("zmq_address", f"has {part} port {match[part]} > 65535")
    return f"host:{match['host']},handshake:{int(match['handshake'])},notify:{int(match['notify'])}"


def _integer(value: Any, field: str) -> int:
    """An int, or a short string of digits (the older shape sends some numbers as text)."""
    if isinstance(value, bool):
        raise RegistryMessageError(field, f"is not an integer: {_show(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdecimal() and len(value) <= 6:
        return int(value)
    raise RegistryMessageError(field, f"is not an integer: {_show(value)}")


def _count(data: dict[str, Any], field: str) -> int:
    value = data.get(field)
    if value is None:
        return 1
    n = _integer(value, field)
    if not 1 <= n <= MAX_PARALLEL:
        raise RegistryMessageError(field, f"must be 1 to {MAX_PARALLEL}, got {n}")
    return n


def _port(value: Any, field: str) -> int:
    n = _integer(value, field)
    if not 1 <= n <= 65535:
        raise RegistryMessageError(field, f"must be a port 1 to 65535, got {n}")
    return n


def _mode(data: dict[str, Any], default_mode: str) -> str:
    raw = data.get("transfer_mode")
    if raw is None:
        return default_mode
    mode = _MODES.get(raw.upper()) if isinstance(raw, str) else None
    if mode is None:
        raise RegistryMessageError("transfer_mode", f"must be READ or WRITE, got {_show(raw)}")
    return mode


def _show(value: Any) -> str:
    """A short, safe rendering of a sender's value for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
