"""Where a base URL's legs go, and the POST written to them in one write."""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit

from connector.errors import ConnectFailed

USER_AGENT = "pdctl-proxy"
Target = tuple[tuple[str, int], str, str, bool, str | None]  # key, Host, prefix, tls, auth


def target_of(base_url: str) -> Target:
    """Where a base URL's legs go: (host, port), the Host header, the path prefix, TLS, and
    the Authorization its user info asks for."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConnectFailed(f"{base_url!r} is not an http:// or https:// URL")
    tls = parts.scheme == "https"
    default = 443 if tls else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    auth = None
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(user_pass.encode()).decode("ascii")
    return (host, port), host_header, parts.path.rstrip("/"), tls, auth


def where(key: tuple[str, int]) -> str:
    return f"{key[0]}:{key[1]}"


def post_request(target: str, host: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}")
    lines += ["Accept: */*", f"User-Agent: {USER_AGENT}", f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body
