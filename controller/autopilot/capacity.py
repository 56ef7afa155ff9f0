"""What one prefill and one decode instance of a deployment can serve, from the stand-in's
timing model (simulator/model/timing.py) of its model on its hardware: the busy seconds each
request costs a role. With the arrivals' mix (connector/measure/demand.py) this says how many
instances of each role the workload needs now, before any queue shows it
(controller/autopilot/decide.py).

Prefill: a prompt's chunks one after another, or several short prompts in one chunk of
max_num_batched_tokens. Decode: a request holds one of max_num_seqs sequences (fewer when the
KV pool cannot hold them all) for its output tokens, at the step time of a full batch: the
most a decode can give, so demand over it is work no queue can absorb. On the wall clock: a
stand-in slowed by --time-scale is that much slower. A deployment's calibrated profile
(`pdctl calibrate`), when its TP is both roles', replaces the datasheet timing: its steps were
measured on the wall clock, so no time scale applies to them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from controller.spec.deployment import DeploymentSpec, InstanceGroup, Role
from controller.spec.sections.timing import timed_spec
from domain import profiles
from domain.engine.defaults import engine_defaults
from simulator.model.calibration.profile import CalibratedProfile, CalibratedTiming
from simulator.model.timing import StepBatch, TimingModel, chunk_attention_pairs


@dataclass(frozen=True, slots=True)
class RoleShape:
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int


@dataclass(frozen=True)
class RoleCapacity:
    """Busy seconds per request on one instance of each role, on the wall clock."""

    prefill: RoleShape
    decode: RoleShape
    timing: dict[int, TimingModel]  # by TP
    kv_pool_tokens: dict[int, int]  # a decode's KV pool, by TP
    time_scale: float
    source: str  # what the figures are a model of, for the event log

    def prefill_seconds(self, prompt: float) -> float:
        """One instance's time per prompt of `prompt` tokens, prompts batched as vLLM does."""
        prompt = max(1, round(prompt))
        shape = self.prefill
        model, chunk = self.timing[shape.tp], shape.max_num_batched_tokens
        if prompt >= chunk:
            return model.prefill_seconds(prompt, chunk) * self.time_scale
        per_step = max(1, min(chunk // prompt, shape.max_num_seqs))
        step = model.step_seconds(
            StepBatch(
                prefill_seqs=per_step,
                prefill_tokens=per_step * prompt,
                prefill_attn_pairs=per_step * chunk_attention_pairs(0, prompt),
            )
        )
        return step / per_step * self.time_scale

    def decode_seconds(self, prompt: float, output: float) -> float:
        """One instance's time per answer of `output` tokens after `prompt`, in a full batch."""
        prompt, output = max(1, round(prompt)), max(1, round(output))
        shape = self.decode
        held = prompt + output
        seqs = max(1, min(shape.max_num_seqs, self.kv_pool_tokens[shape.tp] // held))
        ctx = seqs * (prompt + output // 2)
        step = self.timing[shape.tp].decode_step_seconds(seqs, ctx)
        return output * step / seqs * self.time_scale


def capacity_of(
    spec: DeploymentSpec, calibration: CalibratedProfile | None = None
) -> tuple[RoleCapacity | None, str]:
    """The model of `spec`'s prefill and decode instances, or None and why not; on the
    deployment's calibrated profile when it covers both roles (the note says which)."""
    timed = timed_spec(spec)
    if isinstance(timed, str):
        return None, f"{timed}: no capacity model"
    prefill, decode = _group(spec, Role.PREFILL), _group(spec, Role.DECODE)
    if prefill is None or decode is None:
        return None, "no prefill or no decode group: no capacity model"
    length = spec.max_model_len or profiles.model(timed.model).max_model_len
    p_shape, d_shape = (_shape(g, timed.hardware, length) for g in (prefill, decode))
    if calibration is None:
        return _capacity(timed.model, timed.hardware, p_shape, d_shape, timed.time_scale)
    why = ""
    if (calibration.model, calibration.hardware) != (timed.model, timed.hardware):
        why = f"the calibration is of {calibration.model} on {calibration.hardware}"
    elif {p_shape.tp, d_shape.tp} != {calibration.tp}:
        why = f"the calibration at TP{calibration.tp} is not both roles' TP"
    if why:
        capacity, note = _capacity(timed.model, timed.hardware, p_shape, d_shape, timed.time_scale)
        if capacity is None:
            return None, note
        return replace(capacity, source=f"{capacity.source} ({why}: datasheet)"), ""
    return _calibrated(timed.model, timed.hardware, p_shape, d_shape, calibration), ""


def _calibrated(
    model: str,
    hardware: str,
    prefill: RoleShape,
    decode: RoleShape,
    calibration: CalibratedProfile,
) -> RoleCapacity:
    mp, hp = profiles.model(model), profiles.hardware(hardware)
    timing: dict[int, TimingModel] = {
        calibration.tp: CalibratedTiming(mp, hp, calibration.tp, calibration.steps)
    }
    pool = {decode.tp: timing[decode.tp].kv_pool_tokens()}
    return RoleCapacity(prefill, decode, timing, pool, 1.0, calibration.describe())


UNTIMED_MAX_NUM_SEQS = 256  # where no profile names the hardware: vLLM's smaller tiers


def group_max_num_seqs(spec: DeploymentSpec, group: InstanceGroup) -> int:
    """The sequences one instance of `group` runs at once: its flag, else vLLM's default on
    the spec's hardware (domain/engine/defaults.py: 1024 on an H100 or MI300X, 128 on a
    CPU), else UNTIMED_MAX_NUM_SEQS."""
    if group.max_num_seqs:
        return group.max_num_seqs
    timed = timed_spec(spec)
    if isinstance(timed, str):
        return UNTIMED_MAX_NUM_SEQS
    length = spec.max_model_len or profiles.model(timed.model).max_model_len
    return _shape(group, timed.hardware, length).max_num_seqs


def _group(spec: DeploymentSpec, role: Role) -> InstanceGroup | None:
    return next((g for g in spec.groups if g.role is role), None)


def _shape(group: InstanceGroup, hardware: str, max_model_len: int) -> RoleShape:
    defaults = engine_defaults(
        profiles.hardware(hardware),
        max_model_len=max_model_len,
        world_size=group.tp,
        max_num_batched_tokens=group.max_num_batched_tokens,
        max_num_seqs=group.max_num_seqs,
    )
    return RoleShape(group.tp, defaults.max_num_seqs, defaults.max_num_batched_tokens)


@lru_cache(maxsize=64)
def _capacity(
    model: str, hardware: str, prefill: RoleShape, decode: RoleShape, scale: float
) -> tuple[RoleCapacity, str]:
    mp, hp = profiles.model(model), profiles.hardware(hardware)
    timing = {tp: TimingModel(mp, hp, tp) for tp in {prefill.tp, decode.tp}}
    pool = {decode.tp: timing[decode.tp].kv_pool_tokens()}
    slowed = f", stand-in x {scale:g}" if scale != 1.0 else ""
    source = f"timing model of {model} on {hardware}{slowed}"
    return RoleCapacity(prefill, decode, timing, pool, scale, source), ""
