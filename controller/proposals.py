"""The change behind each advisor verdict that recommends one, as desired state an operator
applies in one step: a new spec (a different P:D ratio, TP, mode, topology, bidirectional KV
on, a render tier) and how the controller carries it out (`how`):

    role_move  one instance changes role at runtime (role_switch on; no restart, 0 lost)
    switch     a zero-loss read/write mode switch (controller/rollout/engine.py)
    revision   the spec is stored as the next revision; a running deployment restarts on it

Each change names the signal its prediction is about (`watch`) and which way it should move.
Pure: a spec, a rule name and the verdict's evidence in, a `Change` out, or None where the
verdict recommends nothing this deployment can do (the advice text still says what to look at).
Most changes follow from the spec alone; a render tier is sized from the evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.spec.deployment import DeploymentSpec, InstanceGroup, Topology
from controller.spec.sections.role_switch import instance_roles
from controller.switch.role_move import plan_move
from domain.engine.frontend_cost import render_instances
from domain.errors import ConfigError
from domain.kv_connectors import backend_for
from domain.modes import Connector, Mode, Role

# What a colocated deployment disaggregates onto: the default connector, which pulls KV (no
# modes) and keeps a turn's blocks for the next (bidirectional KV).
DISAGGREGATE_ONTO = Connector.NIXL.value
MAX_TP = 64  # the spec's bound on a group's TP
# A stopped deployment starts on it; a running one is rolled out to it, and then the proposal
# says what restarts and what that costs (services/proposal_cost.py, from the rollout engine)
RESTART = (
    "a new revision: a running deployment is rolled out to it (roll and hold lose nothing; a "
    "change that restarts the proxy is recreated: connections refused while it restarts, "
    "requests in flight fail)"
)


@dataclass(frozen=True, slots=True)
class Change:
    rule: str
    summary: str  # one line: what changes
    spec: DeploymentSpec  # the desired state after it
    how: str  # role_move | switch | revision
    watch: str  # the advisor signal the prediction is about
    direction: str  # down | up: which way `watch` should move
    disruption: str  # what applying costs while it runs
    instance: str | None = None  # role_move: the instance that changes role
    role: str | None = None  # role_move: the role it serves after
    mode: str | None = None  # switch: the mode every group runs after

    def to_json(self) -> dict:
        return {
            "rule": self.rule,
            "summary": self.summary,
            "how": self.how,
            "watch": {"signal": self.watch, "direction": self.direction},
            "disruption": self.disruption,
            "instance": self.instance,
            "role": self.role,
            "mode": self.mode,
        }


def propose(
    spec: DeploymentSpec, rule: str, evidence: Mapping[str, Any] | None = None
) -> Change | None:
    """The change a triggered verdict of `rule` recommends for this deployment, if any."""
    if rule in SIZED:
        return SIZED[rule](spec, evidence or {})
    maker = PROPOSERS.get(rule)
    return None if maker is None else maker(spec)


# -- per rule ----------------------------------------------------------------------------------


def _disaggregate_for_itl(spec: DeploymentSpec) -> Change | None:
    return _disaggregated(spec, "itl_interference", bidirectional=False)


# long_prompts_high_concurrency also says "disaggregate", but it needs a measured KV link, which
# only a disaggregated deployment has: live, it never fires where that change applies.


def _ttft_bound(spec: DeploymentSpec) -> Change | None:
    """More prefill capacity: a decode becomes a prefill when there are two or more decodes;
    else the prefill (or colocated) instances get twice the TP, where no GPU ids pin them."""
    rule = "ttft_binding"
    if spec.topology is Topology.DISAGGREGATED and _count(spec, Role.DECODE) >= 2:
        return _moved(spec, rule, Role.DECODE, Role.PREFILL, "ttft_p99_ms")
    role = Role.PREFILL if spec.topology is Topology.DISAGGREGATED else Role.COLOCATED
    return _wider(spec, rule, role)


def _itl_bound(spec: DeploymentSpec) -> Change | None:
    """More decode capacity: a prefill becomes a decode (two or more prefills)."""
    if spec.topology is Topology.DISAGGREGATED and _count(spec, Role.PREFILL) >= 2:
        return _moved(spec, "itl_binding", Role.PREFILL, Role.DECODE, "itl_p99_ms")
    return None


def _multi_turn(spec: DeploymentSpec) -> Change | None:
    rule = "multi_turn"
    if spec.topology is Topology.COLOCATED:
        return _disaggregated(spec, rule, bidirectional=True)
    kv = spec.kv_backend
    if kv is None or not kv.bidirectional_kv:
        return None  # only NIXL has it
    if spec.kv_connector_extra_config.get("bidirectional_kv_xfer"):
        return None  # already on
    if any(g.kv_connector_extra_config.get("bidirectional_kv_xfer") is False for g in spec.groups):
        return None  # a group turned it off on purpose: the operator's call
    extra = {**spec.kv_connector_extra_config, "bidirectional_kv_xfer": True}
    new = spec.model_copy(update={"kv_connector_extra_config": extra})
    return Change(
        rule,
        "turn on bidirectional KV transfer (kv_connector_extra_config.bidirectional_kv_xfer): "
        "a turn's prefill pulls back the blocks its decode holds",
        new,
        "revision",
        "prompt_saved_share",
        "up",
        RESTART,
    )


def _frontend_cpu(spec: DeploymentSpec, evidence: Mapping[str, Any]) -> Change | None:
    """A render tier sized to the hot frontend it relieves (domain/engine/frontend_cost.py): enough
    instances that each runs at most half a core taking the prompt side off the decode or
    colocated API servers; without the workload's lengths, one per such instance."""
    if any(g.role is Role.RENDER for g in spec.groups):
        return None  # there is one: scale it by hand (the rule reads its busiest instance)
    fronts = front_instances(spec)
    busiest, share = evidence.get("frontend_cpu_share"), evidence.get("render_load_share")
    if isinstance(busiest, int | float) and isinstance(share, int | float):
        count, sized = render_instances(busiest, share, fronts), "sized to half a core each"
    else:
        count, sized = fronts, "one per decode or colocated instance"
    name = next(n for n in ("render", "render-tier", "frontend") if n not in _names(spec))
    group = InstanceGroup(name=name, role=Role.RENDER, count=count)
    return Change(
        "frontend_cpu",
        f"add a render tier: {count} render instance(s) ({sized}; vllm launch render) turn "
        "requests into token ids, so the engines' API servers no longer parse, template or "
        "tokenize prompts (they still detokenize and stream the answers)",
        spec.model_copy(update={"groups": [*spec.groups, group]}),
        "revision",
        "frontend_cpu_share",
        "down",
        RESTART,
    )


def front_instances(spec: DeploymentSpec) -> int:
    """The engines whose API servers tokenize each request once between them (a request's
    decode or colocated instance; its prefill tokenizes it again, which a render tier ends)."""
    return max(1, sum(g.count for g in spec.groups if g.role in (Role.DECODE, Role.COLOCATED)))


def _slow_transfer(spec: DeploymentSpec) -> Change | None:
    """A connector with modes in read mode (MoRIIO): write mode pushes KV layer by layer while
    the prefill computes, so the transfer hides inside the prefill. Otherwise (or already
    write): colocate."""
    rule = "slow_kv_transfer"
    kv = spec.kv_backend
    if kv is not None and kv.has_modes and any(g.mode is Mode.READ for g in spec.groups):
        groups = [g.model_copy(update={"mode": Mode.WRITE}) for g in spec.groups]
        return Change(
            rule,
            f"switch every group to {kv.label} write mode: the prefill pushes KV while it computes",
            spec.model_copy(update={"groups": groups}),
            "switch",
            "ttft_p99_ms",  # the transfer stays as long; the TTFT it adds is what goes
            "down",
            "a zero-loss mode switch (held or rolled requests wait, none is lost)",
            mode=Mode.WRITE.value,
        )
    return _colocated(spec, rule)


def _light_traffic(spec: DeploymentSpec) -> Change | None:
    return _colocated(spec, "light_traffic")


PROPOSERS: dict[str, Callable[[DeploymentSpec], Change | None]] = {
    "itl_interference": _disaggregate_for_itl,
    "ttft_binding": _ttft_bound,
    "itl_binding": _itl_bound,
    "multi_turn": _multi_turn,
    "slow_kv_transfer": _slow_transfer,
    "light_traffic": _light_traffic,
}

# Proposers that size their change from the verdict's evidence
SIZED: dict[str, Callable[[DeploymentSpec, Mapping[str, Any]], Change | None]] = {
    "frontend_cpu": _frontend_cpu,
}
PROPOSING_RULES = frozenset(PROPOSERS) | frozenset(SIZED)


# -- the changes -------------------------------------------------------------------------------


def _disaggregated(spec: DeploymentSpec, rule: str, *, bidirectional: bool) -> Change | None:
    """A colocated deployment as NIXL prefill and decode groups on the same instances (and GPU
    ids): half prefill (at least one), the rest decode; at least one of each."""
    if spec.topology is not Topology.COLOCATED:
        return None
    serving = [g for g in spec.groups if g.role is Role.COLOCATED]
    group = serving[0]
    total = sum(g.count for g in serving)
    prefills = max(1, total // 2)
    decodes = max(1, total - prefills)
    gpus = [gpu for g in serving for gpu in g.gpus]
    if gpus and (len(gpus) < (prefills + decodes) * group.tp or len(serving) > 1):
        return None  # pinned GPUs that do not split evenly: the operator's layout to draw
    split = prefills * group.tp
    base = {"tp": group.tp, "extra_args": group.extra_args, "env": group.env}
    new_groups = [
        *_beside(spec),
        InstanceGroup(name="prefill", role=Role.PREFILL, count=prefills, gpus=gpus[:split], **base),
        InstanceGroup(
            name="decode",
            role=Role.DECODE,
            count=decodes,
            gpus=gpus[split : split + decodes * group.tp],
            **base,
        ),
    ]
    extra = {"bidirectional_kv_xfer": True} if bidirectional else {}
    new = spec.model_copy(
        update={
            "topology": Topology.DISAGGREGATED,
            "connector": DISAGGREGATE_ONTO,
            "groups": new_groups,
            "kv_connector_extra_config": extra,
            "role_switch": None,
            "autopilot": None,
        }
    )
    with_bidir = " with bidirectional KV transfer" if bidirectional else ""
    return Change(
        rule,
        f"disaggregate: {prefills} prefill and {decodes} decode instance(s) over "
        f"{backend_for(DISAGGREGATE_ONTO).label}"
        f"{with_bidir}, TP {group.tp}",
        new,
        "revision",
        "prompt_saved_share" if bidirectional else "itl_p99_ms",
        "up" if bidirectional else "down",
        RESTART,
    )


def _colocated(spec: DeploymentSpec, rule: str) -> Change | None:
    """A disaggregated deployment as one colocated group on the same GPUs: as many instances
    as fit at the decodes' TP."""
    if spec.topology is not Topology.DISAGGREGATED:
        return None
    tp = next(g.tp for g in spec.groups if g.role is Role.DECODE)
    serving = [g for g in spec.groups if g.role in (Role.PREFILL, Role.DECODE)]
    gpus = [gpu for g in serving for gpu in g.gpus]
    width = sum(g.count * g.tp for g in serving)
    count = max(1, width // tp)
    group = InstanceGroup(
        name="colocated",
        role=Role.COLOCATED,
        count=count,
        tp=tp,
        gpus=gpus[: count * tp] if gpus else [],
    )
    new = spec.model_copy(
        update={
            "topology": Topology.COLOCATED,
            "connector": None,
            "groups": [*_beside(spec), group],
            "kv_connector_extra_config": {},
            "role_switch": None,
            "autopilot": None,
        }
    )
    return Change(
        rule,
        f"colocate: {count} instance(s) serving whole requests, TP {tp} (no KV hand-off)",
        new,
        "revision",
        "ttft_p99_ms",
        "down",
        RESTART,
    )


def _moved(
    spec: DeploymentSpec, rule: str, source: Role, target: Role, watch: str
) -> Change | None:
    """One instance of `source` serves `target`: by a runtime role move where role_switch is
    on, else as a new revision with one instance moved between the groups."""
    if spec.role_switch is not None:
        roles = instance_roles(spec)
        instance = [n for n, r in roles.items() if r is source][-1]
        try:
            move = plan_move(spec, instance, target.value)
        except ConfigError:
            return None
        return Change(
            rule,
            f"move {instance} from {source} to {target} (runtime role switch)",
            move.spec,
            "role_move",
            watch,
            "down",
            f"{instance} drains its legs, then serves {target}; no restart, no request lost",
            instance=instance,
            role=target.value,
        )
    groups = _regrouped(spec, source, target)
    if groups is None:
        return None
    return Change(
        rule,
        f"one {source} instance becomes a {target} instance "
        f"({_count(spec, source) - 1} {source}, {_count(spec, target) + 1} {target})",
        spec.model_copy(update={"groups": groups}),
        "revision",
        watch,
        "down",
        RESTART,
    )


def _regrouped(spec: DeploymentSpec, source: Role, target: Role) -> list[InstanceGroup] | None:
    """The groups with the last `source` group one instance smaller and the first `target`
    group one larger (same TP, its GPU ids moving along); None where that cannot be drawn."""
    groups = list(spec.groups)
    si = max(i for i, g in enumerate(groups) if g.role is source)
    ti = min(i for i, g in enumerate(groups) if g.role is target)
    src, dst = groups[si], groups[ti]
    if src.count < 2 and sum(1 for g in groups if g.role is source) < 2:
        return None
    if src.tp != dst.tp or src.ports or dst.ports or bool(src.gpus) != bool(dst.gpus):
        return None  # different TP or pinned ports: the operator's layout to redraw
    moved = src.gpus[-src.tp :] if src.gpus else []
    new_dst = dst.model_copy(update={"count": dst.count + 1, "gpus": [*dst.gpus, *moved]})
    if src.count == 1:
        groups[ti] = new_dst
        del groups[si]
        return groups
    new_src = src.model_copy(
        update={"count": src.count - 1, "gpus": src.gpus[: -src.tp] if src.gpus else []}
    )
    groups[si], groups[ti] = new_src, new_dst
    return groups


def _wider(spec: DeploymentSpec, rule: str, role: Role) -> Change | None:
    """Twice the TP for every group of `role` (faster prefill); not where GPU ids are pinned
    (the new ones are the operator's to pick) or past the spec's bound."""
    picked = [g for g in spec.groups if g.role is role]
    if not picked or any(g.gpus or g.tp * 2 > MAX_TP for g in picked):
        return None
    groups = [g.model_copy(update={"tp": g.tp * 2}) if g.role is role else g for g in spec.groups]
    tps = ", ".join(f"{g.name} TP {g.tp} -> {g.tp * 2}" for g in picked)
    return Change(
        rule,
        f"twice the tensor parallelism for the {role} instances ({tps}): faster prefills",
        spec.model_copy(update={"groups": groups}),
        "revision",
        "ttft_p99_ms",
        "down",
        RESTART,
    )


def _beside(spec: DeploymentSpec) -> list[InstanceGroup]:
    """Encode and render groups stay as they are: the engines beside them change layout."""
    return [g for g in spec.groups if g.role in (Role.ENCODE, Role.RENDER)]


def _names(spec: DeploymentSpec) -> set[str]:
    return {g.name for g in spec.groups}


def _count(spec: DeploymentSpec, role: Role) -> int:
    return sum(1 for r in instance_roles(spec).values() if r is role)
