"""The render tier in a deployment's spec: at most one group with role `render`, whose
instances turn OpenAI requests into token ids and token ids back into OpenAI answers
(PROTOCOL.md section 4b) for the proxy, so the engines generate on token ids. A render
instance runs no model on a GPU (`vllm launch render`; the stand-in `pdctl sim --render`), so
every engine-only field of its group stays unset.

Pure: the checks relating a render group to the rest of the spec, each at its field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from controller.spec.field_error import FieldError
from domain.modes import Role

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec, InstanceGroup

# Fields a render group may not set: (field, why), checked in this order.
_ENGINE_ONLY = (
    ("tp", "a render instance runs no model: it has no tensor parallelism (leave tp 1)"),
    ("gpus", "a render instance needs no GPU (vllm launch render runs on CPU)"),
    ("mode", "a render instance moves no KV: it has no read/write mode"),
    ("kv_connector_extra_config", "a render instance moves no KV: it has no connector"),
    ("max_num_seqs", "a render instance schedules no sequences: leave max_num_seqs unset"),
    (
        "max_num_batched_tokens",
        "a render instance batches no tokens: leave max_num_batched_tokens unset",
    ),
)
_KV_PORTS = ("handshake", "notify", "side_channel")


def render_groups(spec: DeploymentSpec) -> list[InstanceGroup]:
    return [g for g in spec.groups if g.role is Role.RENDER]


def check_render_tier(spec: DeploymentSpec) -> None:
    """At most one render group, beside engines, with no engine-only field set."""
    found = [i for i, g in enumerate(spec.groups) if g.role is Role.RENDER]
    if not found:
        return
    if len(found) > 1:
        raise FieldError(
            ("groups", found[1], "role"),
            f"a deployment has at most one render group; {spec.groups[found[0]].name!r} is one",
        )
    i = found[0]
    group = spec.groups[i]
    if len(spec.groups) == 1:
        raise FieldError(
            ("groups",),
            "a render group alone serves nothing: it needs engine groups to send token ids to",
        )
    for field, why in _ENGINE_ONLY:
        value = getattr(group, field)
        if (value != 1) if field == "tp" else bool(value):
            raise FieldError(("groups", i, field), why)
    for j, ports in enumerate(group.ports):
        for name in _KV_PORTS:
            if getattr(ports, name) is not None:
                raise FieldError(
                    ("groups", i, "ports", j, name),
                    f"a render instance moves no KV: it has no {name} port",
                )
    if spec.role_switch is not None:
        names = {f"{group.name}-{k}" for k in range(group.count)}
        for name in spec.role_switch.serving:
            if name in names:
                raise FieldError(
                    ("role_switch", "serving", name),
                    f"{name} is a render instance: it serves no prefill or decode role",
                )
