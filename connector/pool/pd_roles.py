"""Runtime P/D role switching as the proxy follows it (newer vLLM's /v1/pd_role; the stand-in
in simulator/server/pd_role.py). An instance that switches roles wants its current role and epoch in
`X-vLLM-PD-Role` / `X-vLLM-PD-Epoch` on every generation request, and answers 409 before
running one that carries stale ones (or arrives while it changes role).

A 409 is a routing event, not a failure: the instance leaves routing at once (fenced), the
proxy re-reads its role and epoch, moves it to the role it now serves when it changed, and
sends the leg elsewhere; it never counts toward ejection. The instance is routed to again once
its role reads `ready` (here, or at the next health round). Each instance's role is read once
after its first healthy probe; one whose /v1/pd_role answers 404 does not switch roles: it
gets no headers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from connector.pool.instances import Instance, InstancePool
from domain.modes import Role

log = logging.getLogger("connector.proxy")
ROLE_HEADER = "X-vLLM-PD-Role"
EPOCH_HEADER = "X-vLLM-PD-Epoch"
SWITCHABLE = (Role.PREFILL, Role.DECODE)


def headers(inst: Instance) -> dict[str, str]:
    """The role and epoch headers for a leg to `inst`; none for an instance that does not
    switch roles (or whose epoch is not known yet: its 409 then teaches the proxy)."""
    if inst.pd_epoch is None:
        return {}
    return {ROLE_HEADER: str(inst.role), EPOCH_HEADER: str(inst.pd_epoch)}


def fence(pool: InstancePool, inst: Instance) -> None:
    """A 409 came back: no new leg goes to it until its role is read again."""
    inst.pd_fenced = True
    pool.on_change()


def apply(pool: InstancePool, inst: Instance, status: dict[str, Any] | None) -> None:
    """Take in a GET /v1/pd_role answer (None: the instance has no such endpoint)."""
    if status is None:
        inst.pd_epoch, inst.pd_fenced, inst.pd_read = None, False, True
        pool.on_change()
        return
    role, epoch, phase = status.get("role"), status.get("epoch"), status.get("phase")
    if role not in SWITCHABLE or isinstance(epoch, bool) or not isinstance(epoch, int):
        return  # not an answer to believe: it stays as it was (fenced, if it was)
    if role != inst.role and pool.get(inst.url) is inst:
        log.info("instance %s now serves %s (epoch %d)", inst.url, role, epoch)
        pool.upsert(
            inst.url,
            role,
            inst.mode,
            zmq_address=inst.zmq_address,
            dp_size=inst.dp_size,
            tp_size=inst.tp_size,
            source=inst.source,
        )
    inst.pd_epoch, inst.pd_fenced, inst.pd_read = epoch, phase != "ready", True
    pool.on_change()


class RoleReader:
    """Reads instances' /v1/pd_role over the proxy's client session."""

    def __init__(
        self,
        pool: InstancePool,
        session: Callable[[], aiohttp.ClientSession | None],
        timeout_s: float = 2.0,
    ) -> None:
        self.pool, self.session = pool, session
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.reads = 0  # role reads done (a 409 or a fenced instance asked for each)

    async def refresh(self, inst: Instance) -> None:
        """Re-read one instance's role and epoch; an unreachable one stays as it is."""
        session = self.session()
        if session is None:
            return
        self.reads += 1
        try:
            async with session.get(inst.url + "/v1/pd_role", timeout=self.timeout) as r:
                if r.status == 404:
                    apply(self.pool, inst, None)
                elif r.status == 200:
                    answer = await r.json(content_type=None)
                    apply(self.pool, inst, answer if isinstance(answer, dict) else {})
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.info("role of %s not read: %s", inst.url, type(exc).__name__)
