"""Tables as kubectl prints them: upper-case headers, columns padded by three spaces, `-` for
nothing, ages as 5s / 3m / 2h / 4d. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

GAP = "   "


def node_address(row: Mapping[str, Any]) -> str | None:
    """Where a process runs, as `show` and `top` both print it: its node's address (a
    cluster's), else the host its URL names; never the node's id (Ray's are 56 hex digits)."""
    if row.get("address"):
        return str(row["address"])
    url = row.get("url")
    return urlsplit(url).hostname if url else None


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """The header and one line per row, each column as wide as its widest cell."""
    lines = [[h.upper() for h in headers], *([cell(c) for c in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        GAP.join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def cell(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return " ".join(str(value).split())


def age(seconds: float | None) -> str:
    """kubectl's AGE: the largest whole unit."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def since(stamp: str | None, now: datetime) -> str:
    """The age of an ISO timestamp the API gave (UTC when it names no zone)."""
    if not stamp:
        return "-"
    then = datetime.fromisoformat(stamp)
    if then.tzinfo is None:
        then = then.replace(tzinfo=now.tzinfo)
    return age((now - then).total_seconds())


def clock(stamp: str | None) -> str:
    """An ISO timestamp as YYYY-MM-DD HH:MM:SS (what an event line shows)."""
    if not stamp:
        return "-"
    return datetime.fromisoformat(stamp).strftime("%Y-%m-%d %H:%M:%S")
