"""How the proxy's settings read their text (connector/settings/): an instance flag's
`URL[#zmq]`, the registry's allowlist and expected registrations, and the sentinels (-1, 0)
that mean "none". Each raises ValueError with a message that names no field: pydantic names it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import AfterValidator

from connector.registry.trust import Expectations, SenderAllowlist


@dataclass(frozen=True, slots=True)
class FlagInstance:
    """An instance given on the command line: `URL[#host:IP,handshake:P,notify:P]`."""

    url: str
    zmq_address: str | None = None

    @classmethod
    def parse(cls, text: str) -> FlagInstance:
        url, _, zmq = text.partition("#")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"instance URL must start with http:// or https://: {text!r}")
        return cls(url.rstrip("/"), zmq or None)

    @property
    def text(self) -> str:
        return f"{self.url}#{self.zmq_address}" if self.zmq_address else self.url


def parse_instance(value: object) -> object:
    return FlagInstance.parse(value) if isinstance(value, str) else value


def one_of(known: tuple[str, ...], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if value not in known:
            raise ValueError(f"unknown {what} {value!r}; expected one of {known}")
        return value

    return AfterValidator(check)


def allowlist(networks: tuple[str, ...]) -> tuple[str, ...]:
    try:
        SenderAllowlist(networks)
    except ValueError as exc:  # its message names the flag; the field is named by the error
        raise ValueError(str(exc).removeprefix("--registry-allow: ")) from None
    return networks


def expected_entries(value: object) -> object:
    """PDCTL_REGISTRY_EXPECTED's JSON (as `pdctl serve` hands it over) -> the entries."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return Expectations.from_json(json.loads(value)).entries()
        except RecursionError:
            raise ValueError("nested too deeply") from None
    return value


def negative_is_none(value: object) -> object:
    return None if isinstance(value, int | float) and value < 0 else value


def zero_is_none(value: object) -> object:
    return None if value == 0 else value
