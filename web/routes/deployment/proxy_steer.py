"""/api/deployments/{name}/proxy/{verb}: pause or release a group's requests, drain or
undrain an instance, at the deployment's pdctl proxy (controller/switch/proxy_steer.py); a
409 saying why on an attached deployment whose proxy is not pdctl's."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from web.deps import Operator, ServiceDep, SettingsDep, StoreDep

router = APIRouter(prefix="/deployments/{name}/proxy", tags=["lifecycle"])


class SteerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str | None = Field(
        None, min_length=1, max_length=80, description="drain, undrain: the instance."
    )
    group: Literal["read", "write", "colocated"] | None = Field(
        None, description="pause, release: one proxy group (default: all)."
    )
    reason: str | None = Field(None, max_length=500, description="Why: kept with its event.")


@router.post("/{verb}")
async def steer_proxy(
    name: str,
    verb: Literal["pause", "release", "drain", "undrain"],
    body: SteerRequest,
    controller: ServiceDep,
    store: StoreDep,
    actor: Operator,
    settings: SettingsDep,
) -> dict[str, Any]:
    """pause: new requests wait in the proxy's bounded queue; release: they go on; drain: no
    new legs to the instance; undrain: routed to again."""
    token = settings.attach_admin_token
    return await controller.steering.steer_proxy(
        store.get(name).spec,
        verb,
        instance=body.instance,
        group=body.group,
        actor=actor.label,
        reason=body.reason,
        proxy_token=token.get_secret_value() if token is not None else None,
    )
