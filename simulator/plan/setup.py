"""What a plan runs on: the candidate layouts (`PlanConfig`, its `--config` grammar, every
layout of a GPU budget), the engines' flags, and the nodes (`PlanSetup`), which checks that a
layout fits, places its engines (simulator/plan/nodes/placement.py), gives each prefill->decode
pair its link (simulator/plan/nodes/links.py) and builds its engines and cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from domain import profiles
from domain.engine.defaults import EngineDefaults, engine_defaults
from domain.measures.slo import SloTargets
from domain.modes import TRANSFER_MODES
from simulator.engine.scheduler import Scheduler, SchedulerConfig
from simulator.model.calibration.profile import CalibratedProfile, CalibratedTiming
from simulator.model.handoff import HandoffLink
from simulator.model.timing import TimingModel
from simulator.plan.cluster import Cluster
from simulator.plan.errors import PlanError
from simulator.plan.nodes.links import Fabric, describe, pair_links, used_pairs
from simulator.plan.nodes.placement import Nodes, Placement, place

_COLOCATED = re.compile(r"^(?P<count>\d+)x-?tp(?P<tp>\d+)$")
_DISAGG = re.compile(
    r"^(?P<p>\d+)p-?tp(?P<ptp>\d+)\+(?P<d>\d+)d-?tp(?P<dtp>\d+)"
    r"(?::(?P<mode>read|write))?$"
)


@dataclass(frozen=True, slots=True)
class PlanConfig:
    """One candidate deployment (its engines' nodes: PlanSetup.place)."""

    kind: str  # colocated | disaggregated
    count: int = 1  # colocated engines
    tp: int = 1  # colocated TP
    prefills: int = 0
    prefill_tp: int = 0
    decodes: int = 0
    decode_tp: int = 0
    mode: str = "write"
    name: str = ""  # a scenario's own name for it; the label otherwise

    @property
    def gpus(self) -> int:
        if self.kind == "colocated":
            return self.count * self.tp
        return self.prefills * self.prefill_tp + self.decodes * self.decode_tp

    def spelled(self) -> str:
        """As `parse_config` reads it back (`--config`)."""
        if self.kind == "colocated":
            return f"{self.count}xtp{self.tp}"
        return (
            f"{self.prefills}p-tp{self.prefill_tp}+{self.decodes}d-tp{self.decode_tp}:{self.mode}"
        )

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "colocated":
            return f"{self.count}xTP{self.tp}"
        return (
            f"{self.prefills}P-TP{self.prefill_tp}+{self.decodes}D-TP{self.decode_tp} {self.mode}"
        )


def parse_config(text: str) -> PlanConfig:
    """`2xtp4` (colocated) or `1p-tp4+1d-tp4:write` (disaggregated; mode defaults to write)."""
    spec = text.strip().lower().replace(" ", "")
    if m := _COLOCATED.match(spec):
        config = PlanConfig("colocated", count=int(m["count"]), tp=int(m["tp"]))
    elif m := _DISAGG.match(spec):
        config = PlanConfig(
            "disaggregated",
            prefills=int(m["p"]),
            prefill_tp=int(m["ptp"]),
            decodes=int(m["d"]),
            decode_tp=int(m["dtp"]),
            mode=m["mode"] or "write",
        )
    else:
        raise PlanError(
            f"--config {text!r}: expected NxtpM (colocated, e.g. 2xtp4) or "
            "XPp-tpA+YDd-tpB[:read|write] (e.g. 1p-tp4+1d-tp4:write)"
        )
    sizes = (
        (config.count, config.tp)
        if config.kind == "colocated"
        else (config.prefills, config.prefill_tp, config.decodes, config.decode_tp)
    )
    if min(sizes) < 1:
        raise PlanError(f"--config {text!r}: every count and TP must be at least 1")
    return config


@dataclass(frozen=True, slots=True)
class EngineFlags:
    """vLLM's engine flags for one role; None: what vLLM picks for the device (resolved by
    `PlanSetup.engine_settings`, domain/engine/defaults.py)."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    num_prompts: int = 100
    input_len: int = 2000
    output_len: int = 1000
    range_ratio: float = 0.0
    burstiness: float = 1.0
    seed: int = 0
    shared_prefix_len: int = 0  # >0: prompts open with one of a few shared prefixes
    num_prefixes: int = 4


# The planner's targets unless told otherwise: the MORI-IO blog's (SCENARIOS.md).
PLAN_SLO = SloTargets(ttft_ms=1000.0, itl_ms=50.0)


@dataclass(frozen=True)
class PlanSetup:
    model: str
    hardware: str
    gpus: int = 8
    colocated_flags: EngineFlags = field(default_factory=EngineFlags)
    prefill_flags: EngineFlags = field(default_factory=EngineFlags)
    decode_flags: EngineFlags = field(default_factory=EngineFlags)
    link_gbps: float | None = None  # the hand-off's bandwidth part, GB/s; None: its path's
    link_latency_s: float = 0.0002  # the hand-off's setup part
    # The KV connector (None: MoRIIO on AMD, NIXL elsewhere) and whether a pair shares a
    # node: together with the hardware they choose the hand-off's path.
    connector: str | None = None
    same_node: bool = True
    slo: SloTargets = PLAN_SLO
    goodput_share: float = 0.9
    # The nodes (simulator/plan/nodes/placement.py): `gpus` is the budget over all of them. One
    # node and no size: one node of `gpus`, the planner before it had nodes.
    nodes: int = 1
    gpus_per_node: int | None = None  # None: `gpus` on one node, else the hardware's
    nics_per_node: int | None = None  # None: the hardware's
    nic_gbit: float | None = None  # Gb/s per NIC; None: the hardware's
    placement: str = "pack"  # pack | split (placement.Nodes)
    # Measured step costs (`pdctl calibrate`): engines of its TP run on them, not the datasheet.
    calibration: CalibratedProfile | None = None

    def check(self, config: PlanConfig) -> None:
        if config.gpus > self.gpus:
            where = "the node has" if self.nodes == 1 else "the budget is"
            raise PlanError(
                f"--config {config.label}: needs {config.gpus} GPUs, {where} {self.gpus} (--gpus)"
            )
        self.place(config)
        tps = [config.tp] if config.kind == "colocated" else [config.prefill_tp, config.decode_tp]
        for tp in tps:
            timing = self._timing(tp)
            if timing.kv_pool_tokens() < 16:
                raise PlanError(
                    f"--config {config.label}: {self.model} does not fit on "
                    f"TP{tp} x {self.hardware}"
                )

    def _timing(self, tp: int) -> TimingModel:
        model, hardware = profiles.model(self.model), profiles.hardware(self.hardware)
        if self.calibration is not None and self.calibration.tp == tp:
            return CalibratedTiming(model, hardware, tp, self.calibration.steps)
        return TimingModel(model, hardware, tp)

    def engine_settings(self, tp: int, flags: EngineFlags) -> EngineDefaults:
        """The flags one engine of TP `tp` runs with, vLLM's defaults filling the gaps."""
        return engine_defaults(
            profiles.hardware(self.hardware),
            max_model_len=profiles.model(self.model).max_model_len,
            world_size=tp,
            max_num_batched_tokens=flags.max_num_batched_tokens,
            max_num_seqs=flags.max_num_seqs,
            enable_prefix_caching=flags.prefix_caching,
        )

    def engine(self, tp: int, flags: EngineFlags) -> Scheduler:
        chosen = self.engine_settings(tp, flags)
        return Scheduler(
            self._timing(tp),
            SchedulerConfig(
                max_num_seqs=chosen.max_num_seqs,
                max_num_batched_tokens=chosen.max_num_batched_tokens,
                block_size=chosen.block_size,
                enable_prefix_caching=chosen.enable_prefix_caching,
            ),
        )

    def defaults_applied(self, configs: list[PlanConfig]) -> dict[str, str]:
        """Per role and TP that the configs use and leave a flag unset: what vLLM's defaults
        chose and why (shown by `pdctl plan` and the planner page)."""
        roles = []
        for config in configs:
            if config.kind == "colocated":
                roles.append((f"colocated TP{config.tp}", config.tp, self.colocated_flags))
            else:
                roles.append(
                    (f"prefill TP{config.prefill_tp}", config.prefill_tp, self.prefill_flags)
                )
                roles.append((f"decode TP{config.decode_tp}", config.decode_tp, self.decode_flags))
        out = {}
        for label, tp, flags in roles:
            text = self.engine_settings(tp, flags).explain()
            if text and label not in out:
                out[label] = text
        return out

    @property
    def kv_connector(self) -> str:
        if self.connector is not None:
            return self.connector
        amd = profiles.hardware(self.hardware).vendor == "AMD"
        return "MoRIIOConnector" if amd else "NixlConnector"

    def node_shape(self) -> Nodes:
        per_node = self.gpus_per_node or (
            self.gpus if self.nodes == 1 else profiles.hardware(self.hardware).gpus_per_node
        )
        return Nodes(self.nodes, per_node, self.placement)

    def place(self, config: PlanConfig) -> Placement:
        """Each engine's node; PlanError naming the flag when the layout cannot be placed."""
        if config.kind == "colocated":
            return place(config.label, self.node_shape(), colocated_tps=[config.tp] * config.count)
        return place(
            config.label,
            self.node_shape(),
            [config.prefill_tp] * config.prefills,
            [config.decode_tp] * config.decodes,
        )

    def fabric(self) -> Fabric:
        hw = profiles.hardware(self.hardware)
        if self.nic_gbit is not None:
            hw = replace(hw, nic_gbit=self.nic_gbit)
        link_gbps, setup_s = self._measured_link()
        measured = self.calibration is not None and self.calibration.handoff is not None
        return Fabric(
            hw,
            self.kv_connector,
            self.nics_per_node or hw.nics_per_node,
            link_gbps,
            setup_s,
            measured=measured and self.link_gbps is None,
        )

    def _measured_link(self) -> tuple[float | None, float]:
        """The hand-off's GB/s and setup: as given, else as the calibration measured them."""
        handoff = self.calibration.handoff if self.calibration is not None else None
        if handoff is None:
            return self.link_gbps, self.link_latency_s
        gbps = self.link_gbps
        if gbps is None and handoff.token_s > 0:
            gbps = profiles.model(self.model).kv_bytes_per_token / handoff.token_s / 1e9
        return gbps, handoff.setup_s

    def pair_links(self, config: PlanConfig) -> list[list[HandoffLink]]:
        """[prefill][decode]: each pair's hand-off, inside its node or between nodes. A pair
        moves KV over as many links (a NIC or peer link per GPU, while the node has NICs) as
        its smaller side has GPUs."""
        ranks = min(config.prefill_tp, config.decode_tp)
        return pair_links(self.fabric(), self.place(config), ranks, self.same_node)

    def handoffs(self, config: PlanConfig) -> list[dict]:
        """The hand-offs the proxy makes, by link (in-node or inter-node, path, GB/s)."""
        return describe(self.pair_links(config), self.place(config), self.same_node)

    def link_bytes_per_s(self, config: PlanConfig) -> float:
        """The hand-off's bandwidth part; of the slowest pair the proxy uses, when they differ."""
        if config.kind == "colocated":
            return self.handoff(config).bandwidth_bytes_s  # no ranks hand off: 0 (or given)
        links = self.pair_links(config)
        return min(
            links[p][d].bandwidth_bytes_s for p, d in used_pairs(config.prefills, config.decodes)
        )

    def handoff(self, config: PlanConfig) -> HandoffLink:
        """A pair's hand-off inside one node (`same_node` permitting)."""
        return self.fabric().link(self.same_node, min(config.prefill_tp, config.decode_tp))

    def cluster(self, config: PlanConfig) -> Cluster:
        if config.kind == "colocated":
            return Cluster(
                colocated=[
                    self.engine(config.tp, self.colocated_flags) for _ in range(config.count)
                ]
            )
        links = self.pair_links(config)
        return Cluster(
            prefills=[
                self.engine(config.prefill_tp, self.prefill_flags) for _ in range(config.prefills)
            ],
            decodes=[
                self.engine(config.decode_tp, self.decode_flags) for _ in range(config.decodes)
            ],
            mode=config.mode,
            link_bytes_per_s=self.link_bytes_per_s(config),
            link_latency_s=self._measured_link()[1],
            handoff=links[0][0],
            # One link for all: the cluster as before nodes; else per pair.
            pair_links=None if len({id(x) for row in links for x in row}) == 1 else links,
        )


# The planner's defaults where nothing is given, one set for `pdctl plan`, POST /api/plan, the
# /plan page and the advisor's forecast: the MORI-IO blog's model on one node of its devices
# (SCENARIOS.md), each engine with vLLM's defaults for that device (`EngineFlags()`: the batch
# sizes and prefix caching of domain/engine/defaults.py, as the fidelity work set them), its
# workload (`Workload()`) at its published 8 req/s. The blog's own engine flags are its
# scenario's (simulator/plan/scenarios.py), run as published.
PLAN_DEFAULTS = PlanSetup("qwen3-235b-a22b-fp8", "mi300x", 8)
PLAN_RATE = 8.0


def candidate_configs(
    gpus: int, modes: tuple[str, ...] = TRANSFER_MODES, max_tp: int = 8
) -> list[PlanConfig]:
    """Every layout of `gpus` GPUs: colocated k x TPm and disaggregated xPyD with TP per role,
    no TP above `max_tp` (a node's GPUs: a TP group stays in its node)."""
    tps = [t for t in (1, 2, 4, 8) if t <= min(gpus, max_tp)]
    out = [PlanConfig("colocated", count=gpus // t, tp=t) for t in tps]
    for ptp in tps:
        for dtp in tps:
            for p in range(1, gpus // ptp + 1):
                d = (gpus - p * ptp) // dtp
                if d >= 1 and p * ptp + d * dtp == gpus:
                    out += [
                        PlanConfig(
                            "disaggregated",
                            prefills=p,
                            prefill_tp=ptp,
                            decodes=d,
                            decode_tp=dtp,
                            mode=m,
                        )
                        for m in modes
                    ]
    return out


def fitting_configs(setup: PlanSetup, modes: tuple[str, ...] = ("write",)) -> list[PlanConfig]:
    """The layouts of the budget that can be placed on the nodes and whose every engine holds
    the model."""
    out = []
    for config in candidate_configs(setup.gpus, modes, setup.node_shape().gpus_per_node):
        try:
            setup.check(config)
        except PlanError:
            continue
        out.append(config)
    return out
