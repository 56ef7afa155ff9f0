"""A discovered group's membership, pure: which found addresses the operator allows, the
stable name each keeps while it stays (`prefill-2` stays `prefill-2` when `prefill-0` goes),
and the events a new look at the source makes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.attached.addresses import url_allowed
from domain.attached.discovery import Found


@dataclass(frozen=True, slots=True)
class Change:
    """Something a deployment's events should say (written as the health events are)."""

    kind: str
    message: str
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Members:
    """A group's instances as last found: address -> index (the name is group-index)."""

    group: str
    by_url: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # address -> why it is not watched

    def names(self) -> dict[str, str]:
        """Instance name -> address, in index order."""
        return {
            f"{self.group}-{i}": url for url, i in sorted(self.by_url.items(), key=lambda x: x[1])
        }


def admitted(found: Found, allowed: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """The found addresses on hosts the operator allows, and the rest with why."""
    hosts = list(allowed)
    kept = [u for u in found.urls if url_allowed(u, hosts)]
    skipped = dict(found.refused)
    for url in found.urls:
        if url not in kept:
            skipped[url] = (
                "its host is not loopback nor among the hosts this control plane may watch "
                "(PDCTL_ATTACH_HOSTS)"
            )
    return kept, skipped


def renumbered(known: Mapping[str, int], urls: list[str]) -> dict[str, int]:
    """Each address's index: the one it had, or the lowest one free for a newcomer."""
    out = {u: known[u] for u in urls if u in known}
    taken = set(out.values())
    free = (i for i in range(len(known) + len(urls) + 1) if i not in taken)
    for url in urls:
        if url not in out:
            out[url] = next(free)
    return out


def moved(
    deployment: str, before: Members, found: Found, allowed: Iterable[str], source: str
) -> tuple[Members, list[Change]]:
    """The group after a look at its source, and the events: each instance that appeared or
    went, each address newly skipped (never scraped: the event names it and why)."""
    kept, skipped = admitted(found, allowed)
    after = Members(before.group, renumbered(before.by_url, kept), skipped)
    old, new = before.names(), after.names()
    changes = [
        Change(
            "attached.instance_appeared",
            f"{deployment}/{name} ({url}) appeared in {source}",
            {"instance": name, "url": url, "source": source},
        )
        for name, url in new.items()
        if old.get(name) != url
    ]
    changes += [
        Change(
            "attached.instance_gone",
            f"{deployment}/{name} ({url}) is no longer in {source}",
            {"instance": name, "url": url, "source": source},
        )
        for name, url in old.items()
        if new.get(name) != url
    ]
    changes += [
        Change(
            "attached.discovery_skipped",
            f"{deployment}/{before.group}: {source} names {url}, not watched: {why}",
            {"group": before.group, "url": url, "why": why, "source": source},
        )
        for url, why in skipped.items()
        if url not in before.skipped
    ]
    return after, changes
