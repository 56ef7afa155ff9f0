"""Which addresses an attached deployment may name: an engine's or a proxy's base URL
(`scheme://host:port`, http or https) on a host its operator allows (loopback always;
PDCTL_ATTACH_HOSTS names more). The spec's checks and discovery's both ask here, so a
discovered address meets the same rules as a listed one."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

SCHEMES = ("http", "https")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def base_url(url: str) -> str:
    """A scheme, a host and maybe a port: the address an engine's /metrics and /v1 hang off.
    Raises ValueError saying what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"scheme {parts.scheme or '(none)'!r}: an address is http or https")
    if not parts.hostname:
        raise ValueError("an address names a host")
    if parts.username or parts.password:
        raise ValueError("an address carries no user or password")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("an address is scheme://host:port, with no path, query or fragment")
    try:
        parts.port  # noqa: B018  # raises on a port out of range
    except ValueError as err:
        raise ValueError(f"bad port: {err}") from None
    return url.rstrip("/")


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Loopback, or a host name, IP or network (10.0.0.0/8) among `allowed`."""
    host = host.lower().strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if host in LOOPBACK_NAMES or (ip is not None and ip.is_loopback):
        return True
    for entry in allowed:
        entry = entry.lower().strip()
        if entry == host:
            return True
        if ip is not None and "/" in entry:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def url_allowed(url: str, allowed: Iterable[str]) -> bool:
    return host_allowed(urlsplit(url).hostname or "", allowed)
