"""Following discovered groups: each tick, every group whose look is due asks its source in
a task of its own (the tick reads the last set and never waits on a source), bounded like a
scrape: a short timeout for the whole answer, a size limit, no redirects followed. A source
that fails keeps the group's last set (an outage of Prometheus is not every engine gone)
and is one event when it starts failing and one when it answers again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from domain.attached.discovery import DiscoveryError, Found, prometheus_targets, router_workers
from observe.discovery.members import Change, Members, moved
from observe.scrape.targets import bounded_body

log = logging.getLogger("pdctl.observe")

TIMEOUT_S = 3.0  # the whole answer, slow or not; a look never holds up a tick anyway
MAX_ANSWER_BYTES = 8 << 20  # thousands of targets with their labels fit well below this
ROUTER_TYPES = {"colocated": "regular"}  # vllm-router's worker_type for a group's role


class SourceFailed(Exception):
    """The source did not answer usably: the message says how."""


@dataclass
class GroupFollower:
    """One discovered group of one deployment: its members and its last look."""

    deployment: str
    group: str
    role: str
    config: dict[str, Any]  # the spec's `discover`, as JSON (a changed one starts afresh)
    members: Members
    error: str | None = None
    resolved_at: float | None = None
    next_at: float = 0.0
    task: asyncio.Task | None = field(default=None, repr=False)

    @property
    def source(self) -> str:
        if self.config.get("prometheus"):
            return f"Prometheus {self.config['prometheus']}"
        return f"vllm-router {self.config['router']}"

    def section(self) -> dict[str, Any]:
        """What the frame shows of this group's discovery."""
        kind = "prometheus" if self.config.get("prometheus") else "router"
        return {
            "group": self.group,
            "source": kind,
            "url": self.config[kind],
            "match": self.config.get("match") or {},
            "every_s": self.config.get("every_s"),
            "found": self.members.names(),
            "skipped": dict(self.members.skipped),
            "error": self.error,
            "resolved_at": self.resolved_at,
        }


class Discoverer:
    """Every attached deployment's discovered groups (observe/scrape/observer.py asks each tick)."""

    def __init__(
        self,
        allowed_hosts: Iterable[str] = (),
        timeout: float = TIMEOUT_S,
        max_bytes: int = MAX_ANSWER_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.allowed = tuple(allowed_hosts)
        self.timeout, self.max_bytes, self.clock = timeout, max_bytes, clock
        self.events: list[tuple[str, Change]] = []
        self._groups: dict[tuple[str, str], GroupFollower] = {}

    def tick(self, name: str, spec: Any, now: float, session: aiohttp.ClientSession) -> None:
        """Start a look at each source of `name` that is due and not already being asked."""
        wanted = set()
        for group in spec.groups:
            if group.discover is None:
                continue
            key = (name, group.name)
            wanted.add(key)
            config = group.discover.model_dump(mode="json")
            follower = self._groups.get(key)
            if follower is None or follower.config != config:
                if follower is not None and follower.task is not None:
                    follower.task.cancel()
                follower = GroupFollower(
                    name, group.name, group.role.value, config, Members(group.name)
                )
                self._groups[key] = follower
            if follower.task is None and now >= follower.next_at:
                follower.next_at = now + float(config["every_s"])
                follower.task = asyncio.create_task(
                    self._look(follower, session), name=f"pdctl-discover-{name}-{group.name}"
                )
        for key in [k for k in self._groups if k[0] == name and k not in wanted]:
            self._drop(key)

    def found(self, name: str) -> dict[str, dict[str, str]]:
        """Group -> instance name -> address, as last found."""
        return {g: f.members.names() for (n, g), f in self._groups.items() if n == name}

    def section(self, name: str) -> list[dict[str, Any]] | None:
        shown = [f.section() for (n, _), f in self._groups.items() if n == name]
        return shown or None

    def forget(self, names: set[str]) -> None:
        """Drop the followers of deployments no longer watched (or no longer attached)."""
        for key in [k for k in self._groups if k[0] not in names]:
            self._drop(key)

    async def close(self) -> None:
        tasks = [f.task for f in self._groups.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._groups.clear()

    def _drop(self, key: tuple[str, str]) -> None:
        follower = self._groups.pop(key)
        if follower.task is not None:
            follower.task.cancel()

    async def _look(self, f: GroupFollower, session: aiohttp.ClientSession) -> None:
        try:
            try:
                found = await self._ask(f, session)
            except (SourceFailed, DiscoveryError) as err:
                self._failed(f, str(err))
                return
            if f.error is not None:
                self.events.append(
                    (
                        f.deployment,
                        Change(
                            "attached.discovery_recovered",
                            f"{f.deployment}/{f.group}: {f.source} answers again",
                            {"group": f.group, "source": f.source},
                        ),
                    )
                )
            f.error, f.resolved_at = None, self.clock()
            f.members, changes = moved(f.deployment, f.members, found, self.allowed, f.source)
            self.events += [(f.deployment, c) for c in changes]
        finally:
            f.task = None

    async def _ask(self, f: GroupFollower, session: aiohttp.ClientSession) -> Found:
        if f.config.get("prometheus"):
            doc = await self._json(session, f.config["prometheus"] + "/api/v1/targets?state=active")
            return prometheus_targets(doc, f.config.get("match") or {})
        doc = await self._json(session, f.config["router"] + "/workers")
        return router_workers(doc, ROUTER_TYPES.get(f.role, f.role))

    async def _json(self, session: aiohttp.ClientSession, url: str) -> Any:
        """`url`'s JSON answer, or SourceFailed saying why (never waits past the timeout)."""
        try:
            async with asyncio.timeout(self.timeout):
                async with session.get(
                    url, allow_redirects=False, timeout=aiohttp.ClientTimeout(total=self.timeout)
                ) as resp:
                    if resp.status != 200:
                        note = " (redirects are not followed)" if 300 <= resp.status < 400 else ""
                        raise SourceFailed(f"{url} answered {resp.status}{note}")
                    body = await bounded_body(resp, self.max_bytes)
        except TimeoutError:
            raise SourceFailed(f"{url}: no whole answer within {self.timeout:g} s") from None
        except (aiohttp.ClientError, OSError) as err:
            raise SourceFailed(f"{url}: {err or type(err).__name__}") from None
        if len(body) > self.max_bytes:
            raise SourceFailed(f"{url} answered more than {self.max_bytes} bytes")
        try:
            return await asyncio.to_thread(json.loads, body)
        except (ValueError, RecursionError) as err:
            raise SourceFailed(f"{url} answered no readable JSON: {err}") from None

    def _failed(self, f: GroupFollower, why: str) -> None:
        """Keep the last set; say so once, when the source starts failing."""
        if f.error is None:
            log.warning("discovery of %s/%s: %s", f.deployment, f.group, why)
            self.events.append(
                (
                    f.deployment,
                    Change(
                        "attached.discovery_failed",
                        f"{f.deployment}/{f.group}: {why}; the last set found is kept",
                        {"group": f.group, "source": f.source, "why": why},
                    ),
                )
            )
        f.error = why
