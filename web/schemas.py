"""Request and response bodies of the REST API (the spec itself is controller.spec.deployment's)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controller import DeploymentSpec, InstancePorts, Slug, redact_spec, redact_text
from domain.finite import json_safe
from state.models import Event, Revision
from state.store import Current
from web.deps import INT64_MAX
from web.diff import Change


class DeploymentEdit(DeploymentSpec):
    """A PUT body: the spec, and optionally the revision it was made from."""

    revision: int | None = Field(
        None,
        ge=1,
        le=INT64_MAX,
        description="The revision this edit was made from (If-Match does the same): if "
        "another has been stored since, 409 naming both, and nothing is stored.",
    )

    def spec(self) -> DeploymentSpec:
        return DeploymentSpec.model_validate(self.model_dump(exclude={"revision"}))


class PortsOut(BaseModel):
    proxy: int
    registry: int
    instances: dict[str, InstancePorts]


class DeploymentOut(BaseModel):
    name: str
    revision: int
    created_at: datetime
    updated_at: datetime
    actor: str = Field(description="Who wrote the current revision.")
    reason: str | None
    state: str = Field(
        "applied",
        description="The current revision's state: pending (stored, not running yet: a new "
        "or stopped deployment until its start has every process ready, a running one's "
        "edit until it is rolled out), in_progress (a change such as a mode switch is under "
        "way: any other change is a 409), applied (every process of it runs and is ready), "
        "failed, rolled_back, or superseded (a newer revision was stored before it ran).",
    )
    spec: DeploymentSpec
    ports: PortsOut = Field(description="Every port, given or allocated.")
    rollout: dict[str, Any] | None = Field(
        None,
        description="The rollout this write began (a running deployment's new revision): what "
        "restarts, by which strategy, its steps; GET .../rollout follows it. With dry_run: "
        "`preview` true, what would change and why, and each strategy with why it cannot "
        "be used here (null: it can).",
    )

    @classmethod
    def of(cls, d: Current, secrets: bool = True) -> DeploymentOut:
        """`secrets=False` (a viewer) masks secret-looking env values and args."""
        spec = (
            d.spec
            if secrets
            else DeploymentSpec.model_validate(redact_spec(d.spec.model_dump(mode="json")))
        )
        return cls(
            name=d.name,
            revision=d.revision,
            created_at=d.created_at,
            updated_at=d.updated_at,
            actor=d.actor,
            reason=d.reason,
            state=d.state,
            spec=spec,
            ports=PortsOut(
                proxy=d.ports.proxy, registry=d.ports.registry, instances=d.ports.instances
            ),
        )


class RevisionSummary(BaseModel):
    number: int
    created_at: datetime
    actor: str
    reason: str | None
    state: str = Field(
        "applied",
        description="pending | in_progress | applied | failed | rolled_back | superseded "
        "(state/changes.py)",
    )

    @classmethod
    def of(cls, r: Revision) -> RevisionSummary:
        return cls(
            number=r.number, created_at=r.created_at, actor=r.actor, reason=r.reason, state=r.state
        )


class RevisionOut(RevisionSummary):
    spec: dict[str, Any]
    ports: dict[str, Any]

    @classmethod
    def of(cls, r: Revision, secrets: bool = True) -> RevisionOut:
        return cls(
            number=r.number,
            created_at=r.created_at,
            actor=r.actor,
            reason=r.reason,
            state=r.state,
            spec=json_safe(r.spec if secrets else redact_spec(r.spec)),
            ports=r.ports,
        )


class ChangeOut(BaseModel):
    path: list[str | int]
    op: str = Field(description="added | removed | changed")
    old: Any
    new: Any

    @classmethod
    def of(cls, c: Change) -> ChangeOut:
        return cls(path=list(c.path), op=c.op, old=json_safe(c.old), new=json_safe(c.new))


class DiffOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    from_: int = Field(alias="from")
    to: int
    changes: list[ChangeOut] = Field(description="Spec fields that differ.")
    port_changes: list[ChangeOut] = Field(description="Allocated ports that differ.")


class CloneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: Slug


class EventOut(BaseModel):
    id: int
    ts: datetime
    actor: str
    kind: str
    deployment: str | None
    message: str
    detail: dict[str, Any]

    @classmethod
    def of(cls, e: Event) -> EventOut:
        """Secrets masked for everyone: events are shown to viewers, on pages and sockets."""
        return cls(
            id=e.id,
            ts=e.ts,
            actor=e.actor,
            kind=e.kind,
            deployment=e.deployment,
            message=redact_text(e.message),
            detail=json_safe(redact_spec(e.detail or {})),
        )
