"""Proxy admin calls a rollout makes without failing on them, and why a step failed, in
one line.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from controller.clients.proxy_admin import ProxyAdminError
from domain.errors import PdctlError


def one_line(exc: BaseException) -> str:
    """Why, in one line: the message of an error pdctl raises, else its type and message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    known = isinstance(exc, PdctlError | TimeoutError | ProxyAdminError)
    if known and text:
        return text[:400]
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:400]


async def safe(call: Awaitable[Any], default: Any) -> Any:
    try:
        return await call
    except (ProxyAdminError, OSError):
        return default


async def quiet(call: Awaitable[Any]) -> None:
    await safe(call, None)
