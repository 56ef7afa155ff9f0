"""Runtime P/D role switching in a deployment's spec: `role_switch` set (even `{}`) starts
every prefill and decode instance with `"kv_role": "kv_both"` (NIXL's, the one connector
whose backend has role_switch) and its serving role in
`"pd_role"` (newer vLLM's /v1/pd_role; the stand-in carries it where vLLM 0.32's CPU build
lacks it), so the controller can move one between roles without a restart
(controller/switch/role_move.py). `serving` names the instances that serve another role than their
group's: each move is a new revision that changes it.

Pure: pydantic and the checks relating `role_switch` to the rest of the spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from controller.spec.field_error import FieldError
from domain.kv_connectors import lookup, offering
from domain.modes import Role

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec, InstanceGroup

InstanceName = Annotated[str, StringConstraints(max_length=48, pattern=r"^[a-z0-9-]{1,48}$")]
SWITCHABLE = (Role.PREFILL, Role.DECODE)


class RoleSwitch(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    serving: dict[InstanceName, Role] = Field(default_factory=dict, max_length=1024)


def switches_roles(connector: str | None) -> bool:
    """Whether `connector`'s instances can move between prefill and decode at run time."""
    kv = lookup(connector)
    return kv is not None and kv.role_switch


def role_switchers() -> str:
    """The connectors that can, for messages."""
    return " or ".join(b.connector for b in offering("role_switch"))


def serving_role(spec: DeploymentSpec, group: InstanceGroup, name: str) -> Role:
    """The role instance `name` of `group` serves now: its group's unless moved."""
    rs = spec.role_switch
    return rs.serving.get(name, group.role) if rs is not None else group.role


def instance_roles(spec: DeploymentSpec) -> dict[str, Role]:
    """Every instance's serving role, by name."""
    return {
        f"{g.name}-{i}": serving_role(spec, g, f"{g.name}-{i}")
        for g in spec.groups
        for i in range(g.count)
    }


def check_role_switch(spec: DeploymentSpec) -> None:
    """role_switch needs NIXL and a disaggregated deployment; every moved instance exists,
    serves prefill or decode, and each of the two roles keeps at least one instance."""
    rs = spec.role_switch
    if rs is None:
        return
    if not switches_roles(spec.connector):
        raise FieldError(
            ("role_switch",),
            f"runtime role switching needs connector {role_switchers()} (it pulls KV and its "
            f"instances run kv_both); this deployment's connector is {spec.connector or 'none'}",
        )
    names = set(spec.instance_names())
    for name, role in rs.serving.items():
        if name not in names:
            raise FieldError(("role_switch", "serving", name), f"no instance named {name!r}")
        if role not in SWITCHABLE:
            raise FieldError(("role_switch", "serving", name), "it serves prefill or decode")
    serving = set(instance_roles(spec).values())
    for role in SWITCHABLE:
        if role not in serving:
            raise FieldError(("role_switch", "serving"), f"no instance would serve {role}")
