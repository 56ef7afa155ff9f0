"""Cross-origin protection (pure ASGI), as Go 1.25's `http.CrossOriginProtection` does it.

The dashboard's forms and htmx posts are authenticated by the login cookie, which a browser
also sends with requests another page makes. Browsers say where a request comes from, so:
an unsafe request (not GET, HEAD, OPTIONS) whose `Sec-Fetch-Site` is present and is neither
`same-origin` nor `none` (typed by the user) is refused; without that header, one whose
`Origin` names another host:port than the request's `Host` is refused; one with neither
header (curl, the CLI, any non-browser client) passes. Origins in `trusted` always pass (a
reverse proxy that rewrites `Host`). Websocket handshakes are GETs that browsers make from
any page with the cookie attached, so they are held to the same rule.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from web.errors import Forbidden, render

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FETCH_SITES_ALLOWED = frozenset({"same-origin", "none"})
WS_REFUSED = 4403  # websocket close code: cross-origin handshake


class CrossOriginRefused(Forbidden):
    title = "Cross-origin request refused"


def refusal(
    method: str,
    host: str | None,
    origin: str | None,
    fetch_site: str | None,
    trusted: frozenset[str] = frozenset(),
) -> str | None:
    """Why this request is refused, or None when it may go on."""
    if method.upper() in SAFE_METHODS:
        return None
    if origin is not None and origin.lower() in trusted:
        return None
    if fetch_site is not None:
        if fetch_site.lower() in FETCH_SITES_ALLOWED:
            return None
        return (
            f"cross-origin request refused: origin {origin or '(not sent)'} is not this "
            f"server (Sec-Fetch-Site: {fetch_site})"
        )
    if origin is None:
        return None  # not a browser, or a browser that says nothing: nothing to go by
    if _host_of(origin) == (host or "").lower():
        return None
    return f"cross-origin request refused: origin {origin} is not this server ({host})"


def _host_of(origin: str) -> str | None:
    """`host[:port]` of an origin as a browser sends it; None for `null` or junk."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return None
    return parts.netloc.lower() if parts.scheme and parts.netloc else None


def normalize_origins(origins: list[str]) -> frozenset[str]:
    return frozenset(o.strip().rstrip("/").lower() for o in origins if o.strip())


class CrossOriginProtection:
    def __init__(self, app: ASGIApp, trusted_origins: list[str] | None = None) -> None:
        self.app = app
        self.trusted = normalize_origins(trusted_origins or [])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        # A websocket handshake is checked as if unsafe: it carries the cookie cross-origin.
        method = "WEBSOCKET" if scope["type"] == "websocket" else scope["method"]
        why = refusal(
            method,
            headers.get("host"),
            headers.get("origin"),
            headers.get("sec-fetch-site"),
            self.trusted,
        )
        if why is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await _close_websocket(why, receive, send)
        else:
            await render(Request(scope), CrossOriginRefused(why))(scope, receive, send)


async def _close_websocket(why: str, receive: Receive, send: Send) -> None:
    # Accept then close, so that the client sees the code and the reason (a close before
    # accepting is a bare HTTP 403).
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    reason = why.encode()[:120].decode(errors="ignore")  # a close reason fits 123 bytes
    await send({"type": "websocket.close", "code": WS_REFUSED, "reason": reason})
