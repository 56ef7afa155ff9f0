"""Who is asking: tokens from settings (`SECRET` or `NAME:SECRET`) for two roles.

With no tokens configured everyone is the anonymous operator (and `pdctl serve` binds
loopback only). The secret comes from `Authorization: Bearer` or the login cookie.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
from dataclasses import dataclass

from web.settings import Settings

COOKIE = "pdctl_token"


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Actor:
    role: Role
    name: str | None  # None: no tokens configured

    @property
    def label(self) -> str:
        """What events record as the actor."""
        return f"{self.role}:{self.name}" if self.name else "anonymous"

    @property
    def may_change(self) -> bool:
        return self.role is Role.OPERATOR


ANONYMOUS = Actor(Role.OPERATOR, None)


class TokenBook:
    def __init__(self, settings: Settings) -> None:
        self._tokens: list[tuple[bytes, Actor]] = []
        for role, tokens in ((Role.VIEWER, settings.viewer_tokens),
                             (Role.OPERATOR, settings.operator_tokens)):
            for i, token in enumerate(tokens, 1):
                name, _, secret = token.rpartition(":")
                self._tokens.append((secret.encode(), Actor(role, name or f"token{i}")))

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def identify(self, secret: str) -> Actor | None:
        """The actor holding `secret`; every token is compared, in constant time each."""
        found = None
        for known, actor in self._tokens:
            if hmac.compare_digest(known, secret.encode()):
                found = found or actor
        return found


def bearer(authorization: str | None) -> str | None:
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return secret.strip() or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere
