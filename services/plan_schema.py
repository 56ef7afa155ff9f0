"""The plan request: what POST /api/plan and the /plan page accept, validated so that each
bad value is a 422 naming its field. Defaults: the planner's (`PLAN_DEFAULTS`, the same as
`pdctl plan`'s): the MORI-IO blog's model and node with vLLM's engine defaults for the device,
its workload at its published 8 req/s."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from domain import profiles
from domain.measures.slo import DEFAULT_ITL_STAT, ItlStatName
from domain.modes import TransferModeName
from simulator.plan import planner
from simulator.plan.cli import parse_rates
from simulator.plan.nodes.placement import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES
from simulator.plan.planner import PLAN_DEFAULTS, PLAN_RATE, PLAN_SLO
from simulator.plan.scenarios import SCENARIOS, mori_io_configs, named_config

MAX_RATES = 20
MAX_PROMPTS = 200
WORKLOAD = planner.Workload()
# The scenario's configurations by their names (colocated-tp8, ..., disagg-write): a config
# may be given by one of these names or as a spec.
NAMED = {c.name: c for c in mori_io_configs()}


def parse_config(text: str) -> planner.PlanConfig:
    return named_config(text)


def _config(text: str) -> str:
    try:
        named_config(text)
    except planner.PlanError as exc:
        raise ValueError(str(exc).removeprefix("--config ")) from None
    return text


def _profile(kind: str):
    def check(name: str) -> str:
        known = profiles.available(kind)
        if name not in known:
            raise ValueError(f"unknown {kind} profile {name!r}; known: {', '.join(known)}")
        return name

    return AfterValidator(check)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class FlagsIn(_Strict):
    """vLLM's engine flags for one role; a field left out (or null): vLLM's default for the
    device, as the result's `engine_defaults` says."""

    max_num_seqs: int | None = Field(None, ge=1, le=4096)
    max_num_batched_tokens: int | None = Field(None, ge=16, le=262_144)
    prefix_caching: bool | None = None


class WorkloadIn(_Strict):
    num_prompts: int = Field(WORKLOAD.num_prompts, ge=1, le=MAX_PROMPTS)
    input_len: int = Field(WORKLOAD.input_len, ge=1, le=16_384)
    output_len: int = Field(WORKLOAD.output_len, ge=1, le=4096)
    range_ratio: float = Field(0.0, ge=0, lt=1)
    burstiness: float = Field(1.0, gt=0, le=100)
    seed: int = Field(0, ge=0, le=2**31)
    shared_prefix_len: int = Field(0, ge=0, le=16_384)
    num_prefixes: int = Field(4, ge=1, le=64)


class SloIn(_Strict):
    ttft_ms: float = Field(PLAN_SLO.ttft_ms, gt=0, le=3_600_000)  # type: ignore[assignment]  # PLAN_SLO sets it
    itl_ms: float = Field(PLAN_SLO.itl_ms, gt=0, le=600_000)  # type: ignore[assignment]  # PLAN_SLO sets it
    itl_stat: ItlStatName = DEFAULT_ITL_STAT.value


def _flags(f: planner.EngineFlags) -> FlagsIn:
    return FlagsIn(
        max_num_seqs=f.max_num_seqs,
        max_num_batched_tokens=f.max_num_batched_tokens,
        prefix_caching=f.prefix_caching,
    )


class PlanRequest(_Strict):
    """A sweep (configurations x rates), a search (`search: true`: every layout of `gpus` on
    the nodes), or a built-in `scenario` (the other fields are then ignored). Defaults: the
    planner's (`PLAN_DEFAULTS`), as `pdctl plan`'s."""

    scenario: str | None = Field(None, description=f"built in: {', '.join(SCENARIOS)}")
    search: bool = False
    search_modes: list[TransferModeName] = Field(["write"], min_length=1)
    configs: list[Annotated[str, AfterValidator(_config)]] = Field(
        default_factory=lambda: list(NAMED),
        min_length=1,
        max_length=8,
        description="2xtp4 (colocated), 1p-tp4+1d-tp4:write (disaggregated), or a name of "
        f"the MORI-IO scenario's: {', '.join(NAMED)}",
    )
    rates: list[float] | str = Field(
        [PLAN_RATE], description="req/s: a list, or start:stop:step (inclusive)"
    )
    model: Annotated[str, _profile("models")] = PLAN_DEFAULTS.model
    hardware: Annotated[str, _profile("hardware")] = PLAN_DEFAULTS.hardware
    gpus: int = Field(
        PLAN_DEFAULTS.gpus,
        ge=1,
        le=MAX_GPUS,
        description="GPUs in all, the budget a search fills; left out with `nodes`: "
        "nodes x gpus_per_node",
    )
    nodes: int | None = Field(
        None, ge=1, le=MAX_NODES, description="default: as many as `gpus` needs"
    )
    gpus_per_node: int | None = Field(
        None, ge=1, le=MAX_GPUS_PER_NODE, description="default: the hardware profile's"
    )
    nics_per_node: int | None = Field(
        None, ge=1, le=64, description="NICs between nodes; default: the hardware profile's"
    )
    nic_gbps: float | None = Field(
        None, gt=0, le=100_000, description="Gb/s (bits) per NIC; default: the profile's"
    )
    placement: Literal["pack", "split"] = Field(
        "pack",
        description="pack: fill nodes in turn; split: prefills and decodes on separate nodes",
    )
    link_gbps: float | None = Field(
        None, gt=0, le=100_000, description="GB/s between P and D; default NICs x TP"
    )
    calibration_of: str | None = Field(
        None,
        max_length=63,
        description="A deployment whose kept calibrated profile (`pdctl calibrate`) times the "
        "engines of its TP instead of the datasheet; its model and hardware must be these",
    )
    workload: WorkloadIn = Field(default_factory=WorkloadIn)
    slo: SloIn = Field(default_factory=SloIn)
    goodput_share: float = Field(PLAN_DEFAULTS.goodput_share, gt=0, le=1)
    colocated_flags: FlagsIn = Field(default_factory=lambda: _flags(PLAN_DEFAULTS.colocated_flags))
    prefill_flags: FlagsIn = Field(default_factory=lambda: _flags(PLAN_DEFAULTS.prefill_flags))
    decode_flags: FlagsIn = Field(default_factory=lambda: _flags(PLAN_DEFAULTS.decode_flags))

    @field_validator("scenario")
    @classmethod
    def _known_scenario(cls, name: str | None) -> str | None:
        if name is not None and name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
        return name

    @field_validator("rates")
    @classmethod
    def _rates(cls, rates: list[float] | str) -> list[float]:
        if isinstance(rates, str):
            rates = _parse_rates(rates)
        if not rates or not all(0 < r <= 10_000 and math.isfinite(r) for r in rates):
            raise ValueError("each rate must be a number in (0, 10000] req/s")
        if len(set(rates)) > MAX_RATES:
            raise ValueError(f"at most {MAX_RATES} rates")
        return sorted(set(rates))


def _parse_rates(text: str) -> list[float]:
    """pdctl plan's `--rate` syntax; a range is counted before it is spelled out."""
    bad = "expected R, R1,R2,... or start:stop:step (inclusive)"
    parts = text.split(":")
    if len(parts) == 3:
        try:
            start, stop, step = (float(x) for x in parts)
        except ValueError:
            raise ValueError(bad) from None
        if (
            step > 0
            and math.isfinite(start)
            and math.isfinite(stop)
            and ((stop - start) / step >= MAX_RATES)
        ):
            raise ValueError(f"{text!r} gives more than {MAX_RATES} rates")
    try:
        return parse_rates(text)
    except (planner.PlanError, OverflowError):
        raise ValueError(bad) from None
