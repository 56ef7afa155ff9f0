"""Runtime prefill/decode role switching, as newer vLLM serves it (docs/features/
runtime_pd_role_switching.md): the CPU build of vLLM here (0.32) lacks it, so the stand-in
carries it.

An engine started with `"kv_role": "kv_both", "pd_role": "prefill"|"decode"` serves one role
at a time under an epoch. `GET /v1/pd_role` reads {role, epoch, phase, ...}; `POST /v1/pd_role
{"role", "expected_epoch", "drain_timeout"}` answers 202 and the change runs on, whoever waits:

    ready --POST--> draining     admission closed (every generation answers 409); accepted
                                 requests finish, streams included
          --------> preparing    the engine finishes its queue and lets go of the KV it still
                                 holds for decodes (pulled, or expired)
          --------> committing   the new role, epoch + 1
          --------> ready
    draining/preparing --drain_timeout--> rolling_back --> ready (old role, same epoch)
    committing --error--> failed (fenced until an operator steps in)

Every generation request must carry `X-vLLM-PD-Role` and `X-vLLM-PD-Epoch` equal to the
current ones while the phase is `ready`; anything else gets 409 before it runs, so a router
may send it elsewhere. The stand-in has one engine core, so its prepare and commit cannot
disagree; `failed` is reached only when the commit itself raises.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from simulator.protocol.format import compact_json

ROLES = ("prefill", "decode")
ROLE_HEADER = "X-vLLM-PD-Role"
EPOCH_HEADER = "X-vLLM-PD-Epoch"
FENCED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
PHASES = ("ready", "draining", "preparing", "committing", "rolling_back", "failed")
DRAIN_POLL_S = 0.01


class RoleChangeRefused(ValueError):
    """A POST the state cannot start: a change already runs (or failed), or a stale epoch."""


class PDRoleState:
    """One engine's serving role, epoch and transition phase; `drained` says whether the engine
    has let go of all its work (its queue, and the KV it holds for decodes)."""

    def __init__(self, role: str, drained: Callable[[], bool]) -> None:
        self.role, self.epoch, self.phase = role, 0, "ready"
        self.drained = drained
        self.active_requests = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.target_role: str | None = None
        self.error: str | None = None
        self.duration: float | None = None
        self.started_at: float | None = None
        self.task: asyncio.Task | None = None
        self.commit: Callable[[str], Awaitable[None]] = _commit_nothing

    def status(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "epoch": self.epoch,
            "phase": self.phase,
            "target_role": self.target_role,
            "active_requests": self.active_requests,
            "error": self.error,
            "transition_seconds": self.duration,
        }

    def refusal(self, role: str | None, epoch: str | None) -> str | None:
        """Why a generation request with these headers may not run now (None: it may)."""
        if self.phase != "ready":
            return f"a role transition is in progress (phase {self.phase})"
        if role != self.role or epoch != str(self.epoch):
            return (
                f"stale P/D role: sent {role!r} epoch {epoch!r}, "
                f"serving {self.role!r} epoch {self.epoch}"
            )
        return None

    def admitted(self) -> None:
        self.active_requests += 1
        self.idle.clear()

    def finished(self) -> None:
        self.active_requests -= 1
        if self.active_requests == 0:
            self.idle.set()

    def start(self, role: str, expected_epoch: int, timeout: float) -> None:
        if self.phase != "ready":
            raise RoleChangeRefused(f"a role transition is already {self.phase}")
        if role == self.role and expected_epoch in (self.epoch, self.epoch - 1):
            return  # already there, or a retried POST of the change that got there
        if expected_epoch != self.epoch:
            raise RoleChangeRefused(
                f"stale role epoch: expected_epoch {expected_epoch}, current epoch {self.epoch}"
            )
        self.phase, self.target_role = "draining", role
        self.error = self.duration = None
        self.started_at = time.monotonic()
        # a task of its own: the change goes on when the POST's caller hangs up
        self.task = asyncio.get_running_loop().create_task(self._switch(role, timeout))

    async def _drain_and_commit(self, role: str) -> None:
        await self.idle.wait()
        self.phase = "preparing"
        while not self.drained():
            await asyncio.sleep(DRAIN_POLL_S)
        self.phase = "committing"
        await self.commit(role)
        self.role, self.epoch = role, self.epoch + 1

    async def _switch(self, role: str, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._drain_and_commit(role), timeout)
            self.phase = "ready"
        except (TimeoutError, RuntimeError, OSError) as exc:
            if isinstance(exc, TimeoutError):
                self.error = f"not drained within drain_timeout {timeout:g} s ({self.phase})"
            else:
                self.error = f"{type(exc).__name__}: {exc}"
            if self.phase == "committing":
                self.phase = "failed"  # the commit is uncertain: never reopen by itself
            else:
                self.phase = "rolling_back"
                await asyncio.sleep(0)  # the stand-in's one core cancels at once
                self.phase = "ready"
        finally:
            self.target_role = None if self.phase == "ready" else self.target_role
            if self.started_at is not None:
                self.duration = time.monotonic() - self.started_at


async def _commit_nothing(role: str) -> None:
    """The stand-in's commit: its KV transport serves both directions already (kv_both)."""


PD_ROLE = web.AppKey("pd_role", PDRoleState)


def _json(obj: object, status: int) -> web.Response:
    return web.Response(
        body=compact_json(obj).encode(), status=status, content_type="application/json"
    )


def install(app: web.Application, role: str, drained: Callable[[], bool]) -> PDRoleState:
    """Add the routes and the admission fence to a stand-in started with a pd_role."""
    state = PDRoleState(role, drained)
    app[PD_ROLE] = state
    app.router.add_get("/v1/pd_role", _get)
    app.router.add_post("/v1/pd_role", _post)
    app.middlewares.append(_fence)
    return state


@web.middleware
async def _fence(request: web.Request, handler) -> web.StreamResponse:
    if request.path not in FENCED_PATHS:
        return await handler(request)
    state = request.app[PD_ROLE]
    why = state.refusal(request.headers.get(ROLE_HEADER), request.headers.get(EPOCH_HEADER))
    if why is not None:
        return _json({"error": "P/D admission rejected", "detail": why, **state.status()}, 409)
    state.admitted()  # no await between the check and this: no request slips past a POST
    try:
        return await handler(request)
    finally:
        state.finished()


async def _get(request: web.Request) -> web.Response:
    return _json(request.app[PD_ROLE].status(), 200)


def parse_change(data: object) -> tuple[str, int, float]:
    """The POST body's (role, expected_epoch, drain_timeout); ValueError names the field."""
    if not isinstance(data, dict):
        raise ValueError("body: must be a JSON object with role, expected_epoch, drain_timeout")
    role = data.get("role")
    if role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    epoch = data.get("expected_epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"expected_epoch: must be a whole number >= 0, got {epoch!r}")
    timeout = data.get("drain_timeout", 120)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"drain_timeout: must be a number of seconds above 0, got {timeout!r}")
    return role, epoch, float(timeout)


async def _post(request: web.Request) -> web.Response:
    state = request.app[PD_ROLE]
    try:
        role, epoch, timeout = parse_change(await request.json())
    except ValueError as exc:  # json's JSONDecodeError is a ValueError too
        return _json({"error": "invalid role change", "detail": str(exc)}, 400)
    try:
        state.start(role, epoch, timeout)
    except RoleChangeRefused as exc:
        return _json({"error": "role change refused", "detail": str(exc), **state.status()}, 409)
    return _json(state.status(), 202)
