"""Pure: the steps of a rollout, for each strategy, from the changes it must make
(controller/rollout/changes.py). Which strategies a layout allows is said here, once; the
forecast, the dialogs, the CLI and the README read it from `allowed`.

- roll: one prefill/decode pair of instances at a time (one instance of each other role) is
  drained, converged and undrained while the others serve. Needs a serving instance of each
  role outside every batch: two or more per role (one group with `count: 2` is enough).
- hold: new requests wait in the proxy's bounded queue while every changed instance drains,
  converges and comes back; then they go out. Any layout; bounded by the proxy's hold deadline.
- keep-serving: a mode switch only, one prefill group and one decode group: while one side
  restarts the other serves whole requests (controller/switch/plan.py).
- recreate: everything that changes at once, no drain and no hold: requests that arrive
  meanwhile are refused. For a deployment nobody uses yet.

A change to the proxy's own settings restarts it last (requests through it are cut; the
rollout says so); a change to the instances it lists alone is told to it, not restarted.

An instance that already runs what is desired but is still starting (one a control plane that
stopped mid-rollout had started) is waited for first, by every strategy: until it serves, it
is not one that the others can lean on.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.rollout.changes import Action, Change
from controller.spec.deployment import DeploymentSpec
from controller.switch.plan import Step, StepKind, SwitchRejected

STRATEGIES = ("roll", "hold", "keep-serving", "recreate")
# What each strategy does and when it applies: the one statement of it that the API's
# descriptions, the CLI's help and the README (tests/test_docs.py checks) repeat.
STRATEGY_SUMMARY = {
    "roll": "one prefill/decode pair of instances at a time while the others serve; needs "
    "two or more instances of each role (one group with count: 2 is enough)",
    "hold": "new requests wait in the proxy's queue while the changed instances restart, then "
    "go out; any layout, bounded by the proxy's hold deadline",
    "keep-serving": "a mode switch of one prefill and one decode group: one side serves whole "
    "requests while the other restarts",
    "recreate": "everything that changes at once; requests meanwhile are refused; the only "
    "one when the proxy itself restarts (a topology or connector change)",
}
SERVING_ROLES = ("prefill", "decode", "colocated", "encode", "render")
MODES = ("read", "write")


class RolloutRejected(SwitchRejected):
    """This rollout cannot be made this way; the message says why (a 409)."""

    title = "Rollout refused"


@dataclass(frozen=True, slots=True)
class Layout:
    """What a plan needs to know of the deployment beyond the changes."""

    registers: bool  # MoRIIO: instances register with the proxy, in their mode's group
    switch_only: bool = False  # only modes change (keep-serving applies)
    both_modes: bool = False  # instances may register in either mode meanwhile (a switch)


def allowed(changes: list[Change], layout: Layout) -> dict[str, str | None]:
    """Each strategy and why it cannot be used here (None: it can)."""
    out: dict[str, str | None] = {}
    cut = _proxy_restarts(changes)
    try:
        _batches(changes)
        out["roll"] = cut
    except RolloutRejected as exc:
        out["roll"] = exc.message
    out["hold"] = cut
    out["keep-serving"] = (
        None
        if layout.switch_only
        else "keep-serving is for a mode switch of one prefill and one decode group"
    )
    out["recreate"] = None
    return out


def default(changes: list[Change], layout: Layout) -> str:
    """Roll where the layout allows it, else hold: neither loses a request. A change to the
    proxy's own settings can only recreate (it restarts; nothing serves through it then)."""
    can = allowed(changes, layout)
    if can["roll"] is None:
        return "roll"
    return "hold" if can["hold"] is None else "recreate"


def _proxy_restarts(changes: list[Change]) -> str | None:
    """Why nothing can keep serving through this change: the proxy itself restarts."""
    proxy = next((c for c in changes if c.role == "proxy"), None)
    if proxy is None or proxy.action is not Action.RESTART or proxy.forced:
        return None
    return (
        f"the proxy restarts ({proxy.why}): requests through it are cut whatever the "
        "strategy, so only recreate applies"
    )


def plan(strategy: str, changes: list[Change], spec: DeploymentSpec, layout: Layout) -> list[Step]:
    """The steps that make `changes` by `strategy`; `spec` is what the changed processes run.
    RolloutRejected naming why when the strategy cannot be used here."""
    if strategy not in STRATEGIES:
        raise RolloutRejected(f"strategy must be one of {', '.join(STRATEGIES)}")
    if strategy == "keep-serving":
        raise RolloutRejected(
            "keep-serving is planned by the mode switch (controller/switch/plan.py)"
        )
    instances = [c for c in changes if c.role != "proxy"]
    proxy = next((c for c in changes if c.role == "proxy"), None)
    first = _ready([c for c in instances if c.starting], layout)
    cut = _proxy_restarts(changes)
    if cut is not None:
        if strategy != "recreate":
            raise RolloutRejected(f"{strategy}: {cut}")
        return first + _recreate_with_proxy(instances, spec, layout)
    if strategy == "roll":
        steps = _roll(_batches(instances), spec, layout)
    elif strategy == "hold":
        steps = _hold(instances, spec, layout)
    else:
        steps = _converge([c for c in instances if c.action is not Action.KEEP], spec, layout)
    steps += _proxy(proxy, spec)
    return first + steps


def _batches(changes: list[Change]) -> list[list[Change]]:
    """One change per role per batch (a prefill/decode pair); a process that stops and one
    that starts travel together, and what does not serve now goes first (restarting it takes
    nothing out of service). RolloutRejected when some batch would leave a role with nothing
    serving: only what serves now counts (a process down or still starting does not)."""
    work: dict[str, list[list[Change]]] = {}
    for role in SERVING_ROLES:
        mine = sorted((c for c in changes if c.role == role), key=lambda c: c.serving)
        restarts = [[c] for c in mine if c.action is Action.RESTART]
        stops = [c for c in mine if c.action is Action.STOP]
        starts = [c for c in mine if c.action is Action.START]
        pairs = [[a, b] for a, b in zip(stops, starts, strict=False)]
        rest = [[c] for c in stops[len(pairs) :] + starts[len(pairs) :]]
        if restarts or pairs or rest:
            work[role] = restarts + pairs + rest
    serving = {
        role: sum(1 for c in changes if c.role == role and _serves(c)) for role in SERVING_ROLES
    }
    batches = []
    for k in range(max((len(w) for w in work.values()), default=0)):
        batch = [c for w in work.values() if k < len(w) for c in w[k]]
        for role in [r for r in SERVING_ROLES if any(c.role == r for c in batch)]:
            mine = [c for c in batch if c.role == role]
            leaving = sum(1 for c in mine if c.leaves and _serves(c))
            if leaving and serving[role] - leaving < 1:
                raise RolloutRejected(_cannot_roll(role, changes, serving[role]))
            serving[role] += sum(1 for c in mine if c.arrives and not _serves(c))
            serving[role] -= sum(1 for c in mine if c.action is Action.STOP and _serves(c))
        batches.append(batch)
    return batches


def _serves(change: Change) -> bool:
    """It serves now, or before any batch begins (a kept instance still starting is waited
    for first)."""
    return (change.serving or change.starting) and change.action is not Action.START


def _cannot_roll(role: str, changes: list[Change], serving: int) -> str:
    total = sum(1 for c in changes if c.role == role and c.action is not Action.START)
    now = f", {serving} serving now" if serving != total else ""
    return (
        f"roll changes one {role} instance at a time while another serves; this deployment "
        f"has {total} {role} instance{'s' if total != 1 else ''}{now}: use hold"
    )


def _names(changes: list[Change], which: str) -> tuple[str, ...]:
    return tuple(c.name for c in changes if getattr(c, which))


def _ready(arriving: list[Change], layout: Layout) -> list[Step]:
    """Wait until every arriving process serves, each in its mode's group (MoRIIO)."""
    plain = tuple(c.name for c in arriving if _listed_by_us(c, layout))
    steps = [Step(StepKind.WAIT_READY, plain)] if plain else []
    for mode in MODES:
        names = tuple(
            c.name for c in arriving if not _listed_by_us(c, layout) and (c.mode or "read") == mode
        )
        if names:
            steps.append(Step(StepKind.WAIT_READY, names, mode=mode))
    return steps


def _recreate_with_proxy(changes: list[Change], spec: DeploymentSpec, layout: Layout) -> list[Step]:
    """The proxy and every changed instance at once: the new proxy is told its instances by
    its command line, so nothing is added or forgotten through its admin API."""
    batch = [c for c in changes if c.action is not Action.KEEP]
    names = ("proxy", *(c.name for c in batch))
    steps = [Step(StepKind.APPLY, names, spec=spec), Step(StepKind.WAIT_READY, ("proxy",))]
    return steps + _ready([c for c in batch if c.arrives], layout)


def _listed_by_us(change: Change, layout: Layout) -> bool:
    """The proxy learns of this instance from the controller (its flags, its admin API), not
    from the instance registering itself (MoRIIO prefills and decodes do)."""
    return not (layout.registers and change.role in ("prefill", "decode"))


def _converge(batch: list[Change], spec: DeploymentSpec, layout: Layout) -> list[Step]:
    """Converge the batch, tell the proxy who comes and goes, wait until the arrivals serve."""
    if not batch:
        return []
    converged = tuple(c.name for c in batch if not c.forced)
    again = tuple(c.name for c in batch if c.forced)
    arriving = [c for c in batch if c.arrives]
    steps = [Step(StepKind.APPLY, converged, spec=spec)] if converged else []
    steps += [Step(StepKind.RESTART, again)] if again else []
    ours = [c for c in batch if _listed_by_us(c, layout)]
    gone = tuple(c.name for c in ours if c.action is Action.STOP)
    # Every arrival is (re)added: adding is idempotent, and a rollback must list again an
    # instance the rollout it undoes had the proxy forget.
    listed = tuple(c.name for c in ours if c.arrives)
    steps += [Step(StepKind.FORGET, gone)] if gone else []
    steps += [Step(StepKind.ADD, listed)] if listed else []
    steps += _ready(arriving, layout)
    # The dropped stop while the arrivals start; the batch ends once they are gone.
    stopped = tuple(c.name for c in batch if c.action is Action.STOP)
    return steps + ([Step(StepKind.WAIT_GONE, stopped)] if stopped else [])


def _roll(batches: list[list[Change]], spec: DeploymentSpec, layout: Layout) -> list[Step]:
    steps: list[Step] = []
    for batch in batches:
        leaving = _names(batch, "leaves")
        restarted = tuple(c.name for c in batch if c.action is Action.RESTART)
        if leaving:  # a batch that only starts instances has nothing to drain
            steps += [Step(StepKind.DRAIN, leaving), Step(StepKind.WAIT_IDLE, leaving)]
        steps += _converge(batch, spec, layout)
        steps += [Step(StepKind.UNDRAIN, restarted)] if restarted else []
    return steps


def _hold(changes: list[Change], spec: DeploymentSpec, layout: Layout) -> list[Step]:
    batch = [c for c in changes if c.action is not Action.KEEP]
    if not batch:
        return []
    leaving = _names(batch, "leaves")
    steps = [Step(StepKind.HOLD_BEGIN)]
    steps += [Step(StepKind.PAUSE, mode=mode) for mode in MODES]
    steps += [Step(StepKind.WAIT_IDLE, leaving)] if leaving else []
    steps += _converge(batch, spec, layout)
    steps += [Step(StepKind.HOLD_END)]
    steps += [Step(StepKind.RESUME, mode=mode) for mode in MODES]
    return steps


def start_ready(spec: DeploymentSpec, registers: bool) -> list[Step]:
    """A start's wait: every instance of `spec` serves, each in its mode's group (MoRIIO)."""
    arriving = [
        Change(f"{g.name}-{i}", Action.START, g.role.value, mode=g.mode.value if g.mode else None)
        for g in spec.groups
        for i in range(g.count)
    ]
    return _ready(arriving, Layout(registers=registers))


def _proxy(proxy: Change | None, spec: DeploymentSpec) -> list[Step]:
    """The proxy itself: restarted last if its own settings changed, else told its new
    launch (the instances it lists) without a restart."""
    if proxy is None:
        return []
    if proxy.action is Action.RESTART:
        kind = StepKind.RESTART if proxy.forced else StepKind.APPLY
        return [Step(kind, ("proxy",), spec=spec), Step(StepKind.WAIT_READY, ("proxy",))]
    if proxy.why:  # the instances it lists changed: it was told them as they changed
        return [Step(StepKind.KEEP_PROXY, ("proxy",), spec=spec)]
    return []
