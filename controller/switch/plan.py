"""Pure: the steps of a zero-loss read/write switch, for each strategy.

A switch is a restart (MoRIIO fixes the mode when an instance starts), and a prefill and
its decode must agree on the mode. The proxy routes each request within one mode group,
so instances in different modes can serve side by side. Strategies:

- roll: two or more prefill and two or more decode instances (one group with `count: 2`
  included); one pair of instances at a time is drained, restarted in the new mode and
  undrained while the others serve. Nothing is held.
- hold: pause dispatch for the old mode's group (new requests wait in the proxy's bounded
  queue), let in-flight requests and KV pulls finish, restart prefill and decode together
  in the new mode; held requests go out as soon as the new group is ready.
- keep-serving: while one side restarts, the other serves whole requests (an engine serves
  a request without kv_transfer_params by itself); then the hand-off is restored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from controller.spec.deployment import DeploymentSpec, InstanceGroup, Mode, Role, who_has
from domain.errors import Conflict, InvalidTransition

STRATEGIES = ("roll", "hold", "keep-serving")


class SwitchRejected(Conflict):
    """This deployment cannot be switched this way; the message says why (a 409)."""

    title = "Switch refused"


class SwitchBusy(SwitchRejected, InvalidTransition):
    """An instance that is not running, or not healthy, stands in the way of a switch."""


class StepKind(StrEnum):
    """What a step does; controller/switch/steps.py performs each kind."""

    DRAIN = "drain"  # the proxy sends the instances nothing new
    UNDRAIN = "undrain"
    WHOLE_ON = "whole_on"  # the instances also serve whole requests (no hand-off)
    WHOLE_OFF = "whole_off"
    PAUSE = "pause"  # the old mode's group holds new requests in the proxy's queue
    RESUME = "resume"
    WAIT_IDLE = "wait_idle"  # until the instances have nothing in flight
    APPLY = "apply"  # the supervisor runs `spec`: the instances restart in the new mode
    WAIT_READY = "wait_ready"  # until they run, are healthy and listed in `mode`'s group
    WAIT_GONE = "wait_gone"  # until the processes a revision drops have stopped
    DEGRADE_BEGIN = "degrade_begin"  # keep-serving: whole requests from here...
    DEGRADE_END = "degrade_end"  # ...to here
    HOLD_BEGIN = "hold_begin"  # hold: new requests wait from here...
    HOLD_END = "hold_end"  # ...to here
    ADD = "add"  # the proxy routes to these new instances (ones that do not register)
    FORGET = "forget"  # the proxy forgets these stopped instances
    KEEP_PROXY = "keep_proxy"  # the proxy's launch becomes `spec`'s, without a restart
    RESTART = "restart"  # these processes restart as they are (the operator asked)
    ROLE_MOVE = "role_move"  # one instance changes role in place (controller/switch/role_move.py)


@dataclass(frozen=True, slots=True)
class Step:
    """One thing the switch runner does. `instances` are instance names (group-index)."""

    kind: StepKind
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


def modes(spec: DeploymentSpec) -> dict[str, str]:
    """Each prefill and decode group's mode, by group name."""
    return {
        g.name: g.mode.value if g.mode else "read"
        for g in spec.groups
        if g.role in (Role.PREFILL, Role.DECODE)
    }


def recovery(actual: DeploymentSpec, target: DeploymentSpec, strategy: str | None) -> list[Step]:
    """The steps after a control plane stopped mid-switch: routing back to normal (neither
    group held, nothing drained or whole); then, if what runs (`actual`, the modes the proxy
    routes the instances in) is the target, wait until it is ready; else the switch again,
    from what runs, by its strategy. SwitchRejected if that cannot be planned."""
    groups = [g for g in actual.groups if g.role in (Role.PREFILL, Role.DECODE)]
    names = _names(groups)
    steps = [
        Step(StepKind.RESUME, mode=Mode.READ.value),
        Step(StepKind.RESUME, mode=Mode.WRITE.value),
        Step(StepKind.WHOLE_OFF, names),
        Step(StepKind.UNDRAIN, names),
    ]
    wanted = set(modes(target).values())
    if modes(actual) != modes(target):
        if strategy is None or len(wanted) != 1:
            raise SwitchRejected("what runs is not the target, and no strategy to reach it")
        return steps + plan(actual, wanted.pop(), strategy)
    for mode in sorted(wanted):
        in_mode = [g for g in groups if (g.mode.value if g.mode else "read") == mode]
        steps.append(Step(StepKind.WAIT_READY, _names(in_mode), mode=mode))
    return steps


def target_spec(spec: DeploymentSpec, steps: list[Step]) -> DeploymentSpec:
    """What runs once every step is done: the spec of the last apply step."""
    applied = [s.spec for s in steps if s.spec is not None]
    return applied[-1] if applied else spec


def plan(spec: DeploymentSpec, target: str, strategy: str) -> list[Step]:
    if strategy not in STRATEGIES:
        raise SwitchRejected(f"strategy must be one of {', '.join(STRATEGIES)}")
    try:
        mode = Mode(target)
    except ValueError:
        raise SwitchRejected("mode must be read or write") from None
    if spec.kv_backend is None or not spec.kv_backend.has_modes:
        raise SwitchRejected(
            f"{spec.connector or 'a colocated deployment'} has no read/write "
            f"modes to switch (only {who_has('has_modes')} does)"
        )
    todo = [g for g in spec.groups if g.mode != mode and g.role is not Role.RENDER]
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
    """One prefill/decode pair of instances at a time, whatever groups they are in (one group
    with `count: 2` per role is enough); each batch converges to the whole target spec."""
    p, d = _names(prefills), _names(decodes)
    if len(p) < 2 or len(d) < 2:
        raise SwitchRejected(
            f"roll restarts one prefill/decode pair of instances at a time while another pair "
            f"serves, so it needs two or more of each; this deployment has {len(p)} prefill and "
            f"{len(d)} decode instance(s): use hold or keep-serving"
        )
    target = with_modes(spec, {g.name for g in prefills + decodes}, mode)
    batches = [(p[i], d[i]) for i in range(min(len(p), len(d)))]
    extra = p[len(batches) :] + d[len(batches) :]
    steps: list[Step] = []
    for names in [*batches, *((n,) for n in extra)]:
        steps += [
            Step(StepKind.DRAIN, names),
            Step(StepKind.WAIT_IDLE, names),
            Step(StepKind.APPLY, names, spec=target),
            Step(StepKind.WAIT_READY, names, mode=mode.value),
            Step(StepKind.UNDRAIN, names),
        ]
    return steps


def _hold(
    spec: DeploymentSpec, mode: Mode, prefill: InstanceGroup, decode: InstanceGroup
) -> list[Step]:
    names = _names([prefill, decode])
    old = prefill.mode.value if prefill.mode else "read"
    return [
        Step(StepKind.HOLD_BEGIN),
        Step(StepKind.PAUSE, mode=old),
        Step(StepKind.WAIT_IDLE, names),
        Step(StepKind.APPLY, names, spec=with_modes(spec, {prefill.name, decode.name}, mode)),
        Step(StepKind.WAIT_READY, names, mode=mode.value),
        Step(StepKind.HOLD_END),
        Step(StepKind.RESUME, mode=old),
    ]


def _keep_serving(
    spec: DeploymentSpec, mode: Mode, prefill: InstanceGroup, decode: InstanceGroup
) -> list[Step]:
    p, d = _names([prefill]), _names([decode])
    half = with_modes(spec, {prefill.name}, mode)
    return [
        Step(StepKind.DEGRADE_BEGIN),
        Step(StepKind.WHOLE_ON, d),  # decodes serve whole requests...
        Step(StepKind.DRAIN, p),  # ...while the prefills drain and restart
        Step(StepKind.WAIT_IDLE, p),
        Step(StepKind.APPLY, p, spec=half),
        Step(StepKind.WAIT_READY, p, mode=mode.value),
        Step(StepKind.UNDRAIN, p),
        Step(StepKind.WHOLE_ON, p),  # then the new prefills serve whole requests...
        Step(StepKind.DRAIN, d),  # ...while the decodes drain and restart
        Step(StepKind.WAIT_IDLE, d),
        Step(StepKind.APPLY, d, spec=with_modes(half, {decode.name}, mode)),
        Step(StepKind.WAIT_READY, d, mode=mode.value),
        Step(StepKind.UNDRAIN, d),  # the hand-off is back: new mode on both sides
        Step(StepKind.WHOLE_OFF, p + d),
        Step(StepKind.DEGRADE_END),
    ]
