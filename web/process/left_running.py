"""What `pdctl serve` says on stderr as it stops: which processes keep running (by design:
instances outlive the control plane), that the next start on the same database adopts them,
and how to stop them. Nothing when nothing runs. Pure: status rows in, text out."""

from __future__ import annotations

from typing import Any

# States of a process that is (or may soon be) up: what a stop leaves behind.
_LIVE = ("RUNNING", "STARTING", "BACKOFF", "STOPPING")


def live_units(statuses: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Per deployment, its processes still alive; deployments with none left out."""
    kept = {name: [u for u in units if u.get("state") in _LIVE] for name, units in statuses.items()}
    return {name: units for name, units in sorted(kept.items()) if units}


def note(
    statuses: dict[str, list[dict[str, Any]]], db: str, server: str, tokens: bool = False
) -> str:
    """The lines to print, or "" when no process runs."""
    live = live_units(statuses)
    if not live:
        return ""
    count = sum(len(units) for units in live.values())
    lines = [f"pdctl serve: stopped; {count} process(es) keep running:"]
    for name, units in live.items():
        for u in units:
            lines.append(f"  {name}/{u['name']}  {_where(u)}  {u.get('state')}")
    names = " ".join(live)
    auth = " -H 'Authorization: Bearer $PDCTL_TOKEN'" if tokens else ""
    lines += [
        f"The next `pdctl serve --db {db}` adopts them (same runtime directory). To stop them:",
        f"  pdctl stop NAME   (NAME: {names}; with `pdctl serve` running)",
        f"  or, before Ctrl-C: curl -X POST{auth} {server}/api/deployments/NAME/stop",
    ]
    return "\n".join(lines)


def _where(unit: dict[str, Any]) -> str:
    parts = []
    if unit.get("pid") is not None:
        parts.append(f"pid {unit['pid']}")
    url = unit.get("url")
    if url:
        parts.append(url)
    return ", ".join(parts) or "(no pid yet)"
