"""The Host allowlist (pure ASGI) of a control plane without tokens: only requests addressed
to a loopback name (127.0.0.1, localhost, [::1], the bound address; any port) or to a name in
PDCTL_ALLOWED_HOSTS are answered. Without tokens anyone who reaches the port is an operator,
and a web page can reach it by DNS rebinding: its name made to resolve to 127.0.0.1, its
requests then look same-origin to the browser and to web/security/csrf.py, but carry its own name as
Host. Refused: HTTP 400 saying so; a websocket is accepted and closed with 4421.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from web.errors import BadRequest, render

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WS_REFUSED = 4421  # websocket close code: a Host this server does not answer to


class HostRefused(BadRequest):
    title = "Host not allowed"


def host_name(host: str) -> str:
    """`host[:port]` as a Host header carries it, without the port, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host.rstrip(".")


def allowed_names(bound_host: str, extra: list[str]) -> frozenset[str]:
    bound = f"[{bound_host}]" if ":" in bound_host else bound_host
    return frozenset({*LOOPBACK_NAMES, bound.lower(), *(host_name(h) for h in extra)})


def refusal(host: str | None, allowed: frozenset[str]) -> str | None:
    """Why a request with this Host is refused, or None when it may go on."""
    if "*" in allowed:
        return None
    if not host:
        return "a Host header is required"
    if host_name(host).rstrip(".") in allowed:
        return None
    return (
        f"Host {host} is not a name this control plane answers to without tokens "
        f"(allowed: {', '.join(sorted(allowed))}; more with PDCTL_ALLOWED_HOSTS)"
    )


class HostAllowlist:
    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1") or None
        why = refusal(host, self.allowed)
        if why is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            reason = why.encode()[:120].decode(errors="ignore")
            await send({"type": "websocket.close", "code": WS_REFUSED, "reason": reason})
        else:
            await render(Request(scope), HostRefused(why))(scope, receive, send)
