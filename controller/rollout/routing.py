"""Pure: which instances must serve whole requests (no hand-off) for the proxy to serve at
all. A control plane that stopped mid keep-serving leaves the prefills in one mode and the
decodes in the other: no mode group then has both roles, and putting routing back to
hand-off only would refuse every request until the rollout (or its rollback) pairs them
again. Whole requests keep them served meanwhile, as keep-serving itself does."""

from __future__ import annotations

from collections.abc import Iterable

from controller.clients.proxy_admin import InstanceEntry

PAIRED = frozenset({"prefill", "decode"})


def whole_needed(entries: Iterable[InstanceEntry], running: set[str]) -> list[str]:
    """The URLs to serve whole requests: every available instance (running, healthy, not
    draining) when no group has an available prefill and decode (or a colocated one); none
    when some group can serve."""
    available = [
        e
        for e in entries
        if e.get("url") in running and e.get("healthy", True) and not e.get("draining")
    ]
    roles: dict[str, set[str]] = {}
    for entry in available:
        roles.setdefault(entry.get("group", ""), set()).add(entry.get("role", ""))
    if not available or any("both" in r or r >= PAIRED for r in roles.values()):
        return []
    return sorted(e["url"] for e in available if e.get("role") in PAIRED)
