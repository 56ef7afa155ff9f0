"""Telling a running proxy that an instance moved to another node (its old one was lost), so
the proxy is not restarted for it: a NIXL-style proxy routes to the new URL (added drained;
the instance's first healthy probe undrains it, as after any restart) and forgets the old one;
a MoRIIO proxy is told the registrations to expect, and the instance registers itself."""

from __future__ import annotations

import contextlib
from typing import Any

from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
from controller.launch.render import Launch


async def tell_proxy_moved(
    proxy_url: str,
    token: str | None,
    old: Launch,
    new: Launch,
    expected: list[dict[str, Any]] | None,
) -> str | None:
    """None once the proxy knows; else why it could not be told."""
    admin = ProxyAdminClient(proxy_url, lambda: token)
    try:
        if new.registers:
            await admin.expect(expected)
        else:
            await admin.add(new.url, new.role or "colocated")
            await admin.drain(new.url)
        with contextlib.suppress(ProxyAdminError):
            await admin.remove(old.url)
    except ProxyAdminError as exc:
        return f"the proxy was not told the move to {new.url}: {exc}"
    finally:
        await admin.aclose()
    return None
