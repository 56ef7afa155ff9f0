"""Pure: what a rollout must do to each process, and why. A process restarts only when what it
would run differs from what it runs (command line, environment, node) or when it is not
serving; a process the desired revision adds starts, one it no longer has stops, and every
other process is left alone."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from controller.launch.process import Launch
from controller.launch.proxy_members import membership_only


class Action(StrEnum):
    KEEP = "keep"
    RESTART = "restart"
    START = "start"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class Running:
    """One process as it runs now."""

    launch: Launch
    state: str  # the supervisor's: RUNNING, STARTING, FATAL, ...
    healthy: bool | None = None
    revision: int | None = None


@dataclass(frozen=True, slots=True)
class Change:
    name: str
    action: Action
    role: str  # prefill | decode | colocated | encode | render | proxy
    why: str = ""
    mode: str | None = None  # the MoRIIO mode it runs in once changed
    url: str | None = None  # where it serves once changed (where it served, if it stops)
    forced: bool = False  # unchanged, restarted because the operator asked
    starting: bool = False  # kept, but not serving yet (spawned or adopted, not ready)
    # It serves now (RUNNING and healthy): taking it out leaves its role with one fewer.
    serving: bool = True

    @property
    def leaves(self) -> bool:
        """It stops serving during its batch (restarted or stopped)."""
        return self.action in (Action.RESTART, Action.STOP)

    @property
    def arrives(self) -> bool:
        """It serves once its batch is done (restarted or started)."""
        return self.action in (Action.RESTART, Action.START)


def changes(running: dict[str, Running], desired: list[Launch]) -> list[Change]:
    """One change per process, the proxy first, in the desired revision's start order, then
    the processes it drops."""
    out = []
    for launch in desired:
        now = running.get(launch.name)
        role = launch.role or "proxy"
        if now is None:
            out.append(
                Change(
                    launch.name, Action.START, role, "new", launch.mode, launch.url, serving=False
                )
            )
            continue
        why = differs(now.launch, launch) or unwell(now)
        action = Action.RESTART if why else Action.KEEP
        if launch.is_proxy and why and lists_only(now, launch):
            # Told through its admin API (controller/rollout/strategies.py KEEP_PROXY).
            action, why = Action.KEEP, "the instances it lists"
        starting = action is Action.KEEP and now.state == "STARTING"
        out.append(
            Change(
                launch.name,
                action,
                role,
                why,
                launch.mode,
                launch.url,
                starting=starting,
                serving=serves(now),
            )
        )
    named = {launch.name for launch in desired}
    for name, now in running.items():
        if name not in named:
            role = now.launch.role or "proxy"
            why = "not in the desired revision"
            out.append(
                Change(
                    name,
                    Action.STOP,
                    role,
                    why,
                    now.launch.mode,
                    now.launch.url,
                    serving=serves(now),
                )
            )
    return out


def serves(now: Running) -> bool:
    """It takes requests now: RUNNING (ready, registered) and not known unhealthy."""
    return now.state == "RUNNING" and now.healthy is not False


def forced(found: list[Change], names: set[str] | None) -> list[Change]:
    """A restart the operator asked for: `names` restart even if unchanged; None: when no
    instance changed, every instance does (the proxy only when named: it cuts requests)."""
    if names is None:
        if any(c.action is not Action.KEEP for c in found if c.role != "proxy"):
            return found
        names = {c.name for c in found if c.role != "proxy"}
    return [
        Change(
            c.name,
            Action.RESTART,
            c.role,
            "restart asked",
            c.mode,
            c.url,
            forced=True,
            serving=c.serving,
        )
        if c.name in names and c.action is Action.KEEP
        else c
        for c in found
    ]


def differs(now: Launch, wanted: Launch) -> str:
    """Why `now` is not what `wanted` runs, in a few words ("" when it is)."""
    if now.address != wanted.address:
        return f"node {now.address or 'this host'} -> {wanted.address or 'this host'}"
    if now.argv != wanted.argv:
        return "command line: " + _first_difference(now.argv, wanted.argv)
    if now.env != wanted.env:
        keys = sorted(k for k in {*now.env, *wanted.env} if now.env.get(k) != wanted.env.get(k))
        return "environment: " + ", ".join(keys[:4])
    return ""


def unwell(now: Running) -> str:
    if now.state not in ("RUNNING", "STARTING"):
        return f"not running ({now.state})"
    if now.state == "RUNNING" and now.healthy is False:
        return "not healthy"
    return ""


def lists_only(now: Running, wanted: Launch) -> bool:
    """Only the instances the proxy lists differ: same node, same environment, a command line
    that differs in its member flags alone, and it serves (else it restarts anyway)."""
    same_place = (now.launch.address, now.launch.env) == (wanted.address, wanted.env)
    return same_place and not unwell(now) and membership_only(now.launch.argv, wanted.argv)


def _first_difference(now: list[str], wanted: list[str]) -> str:
    """The first flag whose value differs, by name (`--kv-transfer-config`)."""
    for i, (a, b) in enumerate(zip(now, wanted, strict=False)):
        if a != b:
            flag = next((x for x in reversed(wanted[: i + 1]) if x.startswith("--")), b)
            return flag[:60]
    return "arguments added or removed"
