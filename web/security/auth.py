"""Who is asking: tokens from settings (`SECRET` or `NAME:SECRET`) for two roles.

With no tokens configured everyone is the anonymous operator (and `pdctl serve` binds
loopback only). The secret comes from `Authorization: Bearer` or the login cookie. Unknown
secrets are counted per client address and over all addresses, at /login, the API and the
websockets alike: past `login_attempts_per_minute` (five times that from all addresses) wrong
secrets get 429 for a while (web/security/ratelimit.py). A right token is never refused, so a
guesser cannot lock operators out; what keeps it from guessing one is the token's length.
The address is the socket's peer: `pdctl serve` trusts no X-Forwarded-For unless
PDCTL_FORWARDED_ALLOW_IPS names the proxy (web/cli.py).
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from web.errors import TooManyRequests
from web.security import device
from web.security.ratelimit import EVERYONE, FailureWindow
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


class TooManyAttempts(TooManyRequests):
    title = "Too many attempts"

    def __init__(self, retry_after: float, everyone: bool = False) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        where = "from all addresses together" if everyone else "from this address"
        super().__init__(f"too many failed sign-ins {where}; try again in {self.retry_after} s")

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class TokenBook:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.clock, self.wall = clock, wall
        self.failures = FailureWindow(settings.login_attempts_per_minute, 60.0)
        secrets = [
            t.rpartition(":")[2] for t in (*settings.viewer_tokens, *settings.operator_tokens)
        ]
        self._device_key = device.device_key(secrets)
        self._tokens: list[tuple[bytes, Actor]] = []
        for role, tokens in (
            (Role.VIEWER, settings.viewer_tokens),
            (Role.OPERATOR, settings.operator_tokens),
        ):
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

    def check(self, secret: str, client: str, device_cookie: str | None = None) -> Actor | None:
        """`identify`, for a client that may be guessing: an unknown secret counts against
        its address and against all addresses; TooManyAttempts for an unknown one once
        either has used up its attempts. A right token is never refused: a lockout that
        refused it let anyone on a shared address lock its operators out (issue 39).
        `device_cookie` is kept for the signature: a signed-in browser needs it no more."""
        now = self.clock()
        actor = self.identify(secret)
        if actor is not None:
            return actor
        wait, whose = self.failures.refusal(client, now)
        self.failures.failed(client, now)
        if wait is not None:
            raise TooManyAttempts(wait, everyone=whose == EVERYONE)
        return None

    def device_cookie(self, actor: Actor) -> str:
        """The cookie a browser gets when `actor` signs in on it."""
        return device.issue(self._device_key, actor.label, self.wall())

    def device_holder(self, cookie: str | None) -> str | None:
        return device.holder(self._device_key, cookie, self.wall())


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
