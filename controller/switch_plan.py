"""Pure: the steps of a zero-loss read/write switch, for each strategy.

A switch is a restart (MoRIIO fixes the mode when an instance starts), and a prefill and
its decode must agree on the mode. The proxy routes each request within one mode group,
so instances in different modes can serve side by side. Strategies:

- roll: two or more prefill/decode group pairs; one pair at a time is drained, restarted in
  the new mode and undrained while the others serve. Nothing is held.
- hold: pause dispatch for the old mode's group (new requests wait in the proxy's bounded
  queue), let in-flight requests and KV pulls finish, restart prefill and decode together
  in the new mode; held requests go out as soon as the new group is ready.
- keep-serving: while one side restarts, the other serves whole requests (an engine serves
  a request without kv_transfer_params by itself); then the hand-off is restored.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.deployment import MODE_CONNECTORS, DeploymentSpec, InstanceGroup, Mode, Role

STRATEGIES = ("roll", "hold", "keep-serving")


class SwitchRejected(ValueError):
    """This deployment cannot be switched this way; the message says why."""


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the switch runner does. `instances` are instance names (group-index)."""

    kind: str  # drain | undrain | whole_on | whole_off | pause | resume | wait_idle |
    #            apply | wait_ready | degrade_begin | degrade_end | hold_begin | hold_end
    instances: tuple[str, ...] = ()
    mode: str | None = None  # pause/resume: the group; wait_ready: the mode to be in
    spec: DeploymentSpec | None = None  # apply: what the supervisor should run

    def describe(self) -> str:
        what = ", ".join(self.instances) if self.instances else (self.mode or "")
        return f"{self.kind} {what}".strip()


def _names(groups: list[InstanceGroup]) -> tuple[str, ...]:
    return tuple(f"{g.name}-{i}" for g in groups for i in range(g.count))


def with_modes(spec: DeploymentSpec, groups: set[str], mode: Mode) -> DeploymentSpec:
    """The spec with the named groups switched to `mode`."""
    switched = [g.model_copy(update={"mode": mode}) if g.name in groups else g for g in spec.groups]
    return spec.model_copy(update={"groups": switched})


def plan(spec: DeploymentSpec, target: str, strategy: str) -> list[Step]:
    if strategy not in STRATEGIES:
        raise SwitchRejected(f"strategy must be one of {', '.join(STRATEGIES)}")
    try:
        mode = Mode(target)
    except ValueError:
        raise SwitchRejected("mode must be read or write") from None
    if spec.connector not in MODE_CONNECTORS:
        raise SwitchRejected(
            f"{spec.connector or 'a colocated deployment'} has no read/write "
            "modes to switch (only MoRIIOConnector does)"
        )
    todo = [g for g in spec.groups if g.mode != mode]
    if not todo:
        raise SwitchRejected(f"every instance group already runs in {mode} mode")
    prefills = [g for g in spec.groups if g.role is Role.PREFILL]
    decodes = [g for g in spec.groups if g.role is Role.DECODE]
    if strategy == "roll":
        return _roll(spec, mode, prefills, decodes)
    if len(prefills) != 1 or len(decodes) != 1:
        raise SwitchRejected(
            f"{strategy} switches one prefill group and one decode group; "
            "this deployment has several: use roll"
        )
    if strategy == "hold":
        return _hold(spec, mode, prefills[0], decodes[0])
    return _keep_serving(spec, mode, prefills[0], decodes[0])


def _roll(
    spec: DeploymentSpec, mode: Mode, prefills: list[InstanceGroup], decodes: list[InstanceGroup]
) -> list[Step]:
    if len(prefills) < 2 or len(decodes) < 2:
        raise SwitchRejected(
            "roll needs at least two prefill groups and two decode groups, "
            "so that one pair serves while the other restarts; use hold or "
            "keep-serving"
        )
    pairs = min(len(prefills), len(decodes))
    batches = [[prefills[i], decodes[i]] for i in range(pairs)]
    batches[-1] += prefills[pairs:] + decodes[pairs:]
    steps: list[Step] = []
    done: set[str] = set()
    for batch in batches:
        names = _names(batch)
        done |= {g.name for g in batch}
        steps += [
            Step("drain", names),
            Step("wait_idle", names),
            Step("apply", names, spec=with_modes(spec, done, mode)),
            Step("wait_ready", names, mode=mode.value),
            Step("undrain", names),
        ]
    return steps


def _hold(
    spec: DeploymentSpec, mode: Mode, prefill: InstanceGroup, decode: InstanceGroup
) -> list[Step]:
    names = _names([prefill, decode])
    old = prefill.mode.value if prefill.mode else "read"
    return [
        Step("hold_begin"),
        Step("pause", mode=old),
        Step("wait_idle", names),
        Step("apply", names, spec=with_modes(spec, {prefill.name, decode.name}, mode)),
        Step("wait_ready", names, mode=mode.value),
        Step("hold_end"),
        Step("resume", mode=old),
    ]


def _keep_serving(
    spec: DeploymentSpec, mode: Mode, prefill: InstanceGroup, decode: InstanceGroup
) -> list[Step]:
    p, d = _names([prefill]), _names([decode])
    half = with_modes(spec, {prefill.name}, mode)
    return [
        Step("degrade_begin"),
        Step("whole_on", d),  # decodes serve whole requests...
        Step("drain", p),  # ...while the prefills drain and restart
        Step("wait_idle", p),
        Step("apply", p, spec=half),
        Step("wait_ready", p, mode=mode.value),
        Step("undrain", p),
        Step("whole_on", p),  # then the new prefills serve whole requests...
        Step("drain", d),  # ...while the decodes drain and restart
        Step("wait_idle", d),
        Step("apply", d, spec=with_modes(half, {decode.name}, mode)),
        Step("wait_ready", d, mode=mode.value),
        Step("undrain", d),  # the hand-off is back: new mode on both sides
        Step("whole_off", p + d),
        Step("degrade_end"),
    ]
