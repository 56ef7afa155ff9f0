"""Where a deployment's processes may run: the spec's placement fields (pure pydantic).

A node is named by its Ray node id, its address, or a selector on the resources and labels it
advertises (Ray custom resources and node labels; Kubernetes node labels). A group's
`placement` says which nodes its instances may go to (any of `nodes`; none: any node), how
many GPUs each takes (Ray assigns the indices; default: its TP size) and how many nodes one
instance spans (multi-node TP: the Kubernetes renderer makes a LeaderWorkerSet of it, the Ray
backend refuses it for now). The proxy's `node` says where the proxy runs (default: the node
of the control plane). Matching nodes to these is controller/launch/placement.py's.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from controller.spec.field_error import FieldError

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec

# Ray node ids are 56 hex digits; a unique prefix of 8 or more names one too, as `ray status`
# shows them shortened.
NodeId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8,56}$")]
# Ray resource names and Kubernetes label keys (prefix/name) and values.
ResourceName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,62}$")]
LabelKey = Annotated[
    str,
    StringConstraints(
        pattern=r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"
    ),
]
LabelValue = Annotated[
    str, StringConstraints(pattern=r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
]


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (Ray names nodes by IP)") from None


NodeAddress = Annotated[str, StringConstraints(max_length=45), AfterValidator(_ip)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class NodeSelector(_Strict):
    """One node, or every node that has all of the given resources and labels."""

    node_id: NodeId | None = None
    address: NodeAddress | None = None
    resources: dict[ResourceName, Annotated[float, Field(gt=0, le=1e9)]] = Field(
        default_factory=dict, max_length=16
    )
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16)

    def is_empty(self) -> bool:
        return not (self.node_id or self.address or self.resources or self.labels)

    def describe(self) -> str:
        parts = []
        if self.node_id:
            parts.append(f"node id {self.node_id}")
        if self.address:
            parts.append(f"address {self.address}")
        parts += [f"resource {k}>={v:g}" for k, v in self.resources.items()]
        parts += [f"label {k}={v}" for k, v in self.labels.items()]
        return ", ".join(parts) or "any node"


class Placement(_Strict):
    nodes: list[NodeSelector] = Field(default_factory=list, max_length=64)  # any of these
    gpus_per_instance: float | None = Field(None, ge=0, le=64)  # None: the group's TP size
    nodes_per_instance: int = Field(1, ge=1, le=64)


def check_placement(spec: DeploymentSpec) -> None:
    for i, group in enumerate(spec.groups):
        placement = group.placement
        if placement is None:
            continue
        loc = ("groups", i, "placement")
        if group.gpus and placement.gpus_per_instance is not None:
            raise FieldError(
                (*loc, "gpus_per_instance"),
                "GPUs asked twice: gpus lists ids and placement.gpus_per_instance asks for a "
                "count; give the ids on one host, the count on a cluster (where Ray assigns them)",
            )
        for k, selector in enumerate(placement.nodes):
            if selector.is_empty():
                raise FieldError(
                    (*loc, "nodes", k),
                    "a node selector names a node_id, an address, resources or labels",
                )
    if spec.proxy.node is not None and spec.proxy.node.is_empty():
        raise FieldError(
            ("proxy", "node"), "a node selector names a node_id, an address, resources or labels"
        )
