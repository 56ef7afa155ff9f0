"""/api/deployments/{name}/role-moves: move one running instance between prefill and decode
without a restart (runtime P/D role switching, controller/switch/role_move.py), as a new
revision; on an attached deployment through its engines' own /v1/pd_role
(controller/switch/attached_steer.py)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from domain.role_moves import DRAIN_TIMEOUT_S
from web.deps import Operator, ServiceDep, SettingsDep, StoreDep

router = APIRouter(prefix="/deployments/{name}", tags=["lifecycle"])


class RoleMoveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    instance: str = Field(min_length=1, max_length=80, description="An instance, e.g. decode-1.")
    role: Literal["prefill", "decode"] = Field(description="The role it serves after the move.")
    reason: str = Field(min_length=1, max_length=500, description="Why: kept with the revision.")
    drain_timeout_s: float = Field(
        DRAIN_TIMEOUT_S,
        gt=0,
        le=3600,
        description="How long its legs and its engine may take to drain.",
    )
    force: bool = Field(
        False,
        description="Attached behind a proxy that is not pdctl's: move all the same, knowing "
        "that proxy is neither drained nor told the new role (the answer's `warning`).",
    )


@router.post("/role-moves")
async def move_role(
    name: str,
    body: RoleMoveRequest,
    controller: ServiceDep,
    store: StoreDep,
    actor: Operator,
    settings: SettingsDep,
) -> dict[str, Any]:
    """Drain the instance at the proxy, change its role on the engine (POST /v1/pd_role),
    route to it in its new role; answers once it serves it, with the new revision."""
    current = store.get(name)
    token = settings.attach_admin_token
    return await controller.move_role(
        name,
        current.spec,
        body.instance,
        body.role,
        store=store,
        actor=actor.label,
        reason=body.reason,
        drain_timeout_s=body.drain_timeout_s,
        force=body.force,
        proxy_token=token.get_secret_value() if token is not None else None,
    )
