"""Whom the registry believes. MoRIIO's registration protocol has no authentication, so the
proxy decides from what it knows. Pure.

- `Expectations`: under `pdctl serve` the controller knows every instance it launched and
  hands the proxy the whole of each registration it expects (URL, role, allowed modes, ZMQ
  handshake and notify ports, TP and DP sizes). A registration that is not expected, or that
  differs from what was launched in any field, is refused naming that field. A mode switch
  the controller runs widens an instance's allowed modes first.
- `SenderAllowlist`: which networks may register at all (`--registry-allow`, loopback by
  default), checked against the socket's peer and against every address a message names.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from connector.registry.message import (
    Registration,
    RegistryMessageError,
    parse_message,
)
from domain.modes import TRANSFER_MODES

LOOPBACK = ("127.0.0.0/8", "::1")
_MODES = tuple(m.value for m in TRANSFER_MODES)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a registration was not taken: the field at fault and a plain sentence."""

    reason: str  # unexpected | mismatch | sender | role | flapping | configured
    field: str
    message: str


@dataclass(frozen=True, slots=True)
class ExpectedInstance:
    url: str
    role: str  # prefill | decode
    modes: frozenset[str]  # one, or both while a switch the controller runs is under way
    zmq_address: str | None
    tp_size: int = 1
    dp_size: int = 1

    def judge(self, reg: Registration) -> Refusal | None:
        expected = {
            "type": (self.role, reg.role),
            "zmq_address": (self.zmq_address, reg.zmq_address),
            "tp_size": (self.tp_size, reg.tp_size),
            "dp_size": (self.dp_size, reg.dp_size),
        }
        for field, (want, got) in expected.items():
            if want != got:
                return Refusal(
                    "mismatch",
                    field,
                    f"{reg.url} registered {field} {got!r}, but was launched with {want!r}",
                )
        if reg.mode not in self.modes:
            allowed = " or ".join(sorted(m.upper() for m in self.modes))
            return Refusal(
                "mismatch",
                "transfer_mode",
                f"{reg.url} registered transfer_mode {reg.mode.upper()}, but was launched "
                f"with {allowed} and no switch expects it",
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "role": self.role,
            "modes": sorted(self.modes),
            "zmq_address": self.zmq_address,
            "tp_size": self.tp_size,
            "dp_size": self.dp_size,
        }


def expected_instance(data: Any, where: str = "expected") -> ExpectedInstance:
    """One expected registration from JSON; raises ValueError naming the field."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be an object")
    modes = data.get("modes", [data.get("mode")])
    if (
        not isinstance(modes, list)
        or not modes
        or any(m not in _MODES for m in modes)
        or len(set(modes)) != len(modes)
    ):
        raise ValueError(f"{where}.modes must be a list of read and/or write")
    role = data.get("role")
    if role not in ("prefill", "decode"):
        raise ValueError(f"{where}.role must be prefill or decode")
    # Parse it as the instance itself would say it, so both sides normalise the same way.
    try:
        reg = parse_message(
            {
                "type": "P" if role == "prefill" else "D",
                "http_address": data.get("url"),
                "zmq_address": data.get("zmq_address"),
                "tp_size": data.get("tp_size", 1),
                "dp_size": data.get("dp_size", 1),
            }
        )
    except RegistryMessageError as exc:
        raise ValueError(f"{where}.{exc.field.replace('http_address', 'url')}: {exc}") from None
    if reg is None:  # cannot happen for a P/D message; keeps the type checker honest
        raise ValueError(f"{where} is not a registration")
    return ExpectedInstance(
        reg.url, reg.role, frozenset(modes), reg.zmq_address, reg.tp_size, reg.dp_size
    )


class Expectations:
    """The registrations the controller launched, keyed by URL."""

    def __init__(self, entries: Iterable[ExpectedInstance] = ()) -> None:
        self._by_url = {e.url: e for e in entries}

    @classmethod
    def from_json(cls, data: Any) -> Expectations:
        if not isinstance(data, list) or len(data) > 4096:
            raise ValueError("expected must be a list of at most 4096 instances")
        entries = [expected_instance(d, f"expected[{i}]") for i, d in enumerate(data)]
        return cls(entries)

    def judge(self, reg: Registration) -> Refusal | None:
        want = self._by_url.get(reg.url)
        if want is None:
            return Refusal(
                "unexpected",
                "http_address",
                f"{reg.url} is not an instance this deployment launched",
            )
        return want.judge(reg)

    def entries(self) -> tuple[ExpectedInstance, ...]:
        return tuple(self._by_url.values())

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self._by_url.values()]

    def __len__(self) -> int:
        return len(self._by_url)


class SenderAllowlist:
    """Networks that may register. Hostnames other than localhost are refused unless every
    address is allowed (`any`), since what a name resolves to is the sender's choice."""

    def __init__(self, networks: Iterable[str] = LOOPBACK) -> None:
        self.any = False
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for text in networks:
            if text.strip().lower() in ("any", "*"):
                self.any = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(text.strip(), strict=False))
            except ValueError:
                raise ValueError(
                    f"--registry-allow: {text!r} is not an address, a network or 'any'"
                ) from None

    def allows(self, host: str | None) -> bool:
        if self.any:
            return True
        if not host:
            return False
        host = host.strip("[]").lower()
        if host == "localhost":
            host = "127.0.0.1"
        try:
            addr = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self.networks)

    def judge(self, reg: Registration, peer: str | None) -> Refusal | None:
        if peer is not None and not self.allows(peer):
            return Refusal("sender", "sender", f"a registration from {peer} is not allowed")
        for field, host in (("http_address", reg.host), ("zmq_address", _zmq_host(reg))):
            if host is not None and not self.allows(host):
                return Refusal("sender", field, f"{field} host {host} is not allowed")
        return None

    def describe(self) -> list[str]:
        return ["any"] if self.any else [str(n) for n in self.networks]


def _zmq_host(reg: Registration) -> str | None:
    if not reg.zmq_address:
        return None
    return reg.zmq_address.split(",", 1)[0].removeprefix("host:")
