"""Signed device cookies: a browser that signed in is told apart from a guesser on the same
address, so that a lockout (web/security/ratelimit.py) does not shut out an operator who signed in
before it. Pure: the key and `now` are passed in.

The cookie names the actor that signed in on this browser, when, and an HMAC over both
keyed by every configured token: no one can mint one without signing in (a viewer's token
is not enough to forge an operator's), and changing the tokens retires every device.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable

DEVICE_COOKIE = "pdctl_device"
MAX_AGE_S = 30 * 86400


def device_key(secrets: Iterable[str]) -> bytes:
    return hashlib.sha256(
        b"pdctl device\0" + b"\0".join(s.encode() for s in sorted(secrets))
    ).digest()


def issue(key: bytes, actor: str, now: float) -> str:
    """A cookie value for `actor` (its label) issued at `now` (epoch seconds)."""
    body = f"{base64.urlsafe_b64encode(actor.encode()).decode()}.{int(now)}"
    return f"{body}.{_sign(key, body)}"


def holder(key: bytes, cookie: str | None, now: float) -> str | None:
    """The actor label a valid, unexpired cookie was issued to; None for anything else."""
    if not cookie or cookie.count(".") != 2:
        return None
    body, _, signature = cookie.rpartition(".")
    if not hmac.compare_digest(signature, _sign(key, body)):
        return None
    encoded, _, issued = body.partition(".")
    if not issued.isdigit() or not 0 <= now - int(issued) <= MAX_AGE_S:
        return None
    try:
        return base64.urlsafe_b64decode(encoded.encode()).decode()
    except ValueError:
        return None


def _sign(key: bytes, body: str) -> str:
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
