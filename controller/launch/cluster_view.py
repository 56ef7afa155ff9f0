"""Pure: the cluster as a person reads it: every node the backend lists (head first, then by
address), each with the processes the supervisor has on it, from its status rows."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.launch.placement import Node


@dataclass(frozen=True, slots=True)
class NodeProcess:
    """One supervised process on a node."""

    deployment: str
    process: str  # an instance name, or "proxy"
    role: str
    state: str


@dataclass(frozen=True, slots=True)
class NodeView:
    node: Node
    processes: tuple[NodeProcess, ...] = ()


def cluster_view(
    nodes: Sequence[Node],
    statuses: Mapping[str, Sequence[Mapping[str, Any]]],
    unplaced_on: str | None = None,
) -> list[NodeView]:
    """`statuses`: each deployment's status rows (their "node" is a node id, or None when not
    placed on a cluster). Rows without a node are on `unplaced_on` (one host: every process is
    on it) or on none. A STOPPED process runs nowhere and is left out."""
    on: dict[str, list[NodeProcess]] = {n.id: [] for n in nodes}
    for deployment in sorted(statuses):
        for row in statuses[deployment]:
            node = row.get("node") or unplaced_on
            if row["state"] != "STOPPED" and node in on:
                on[node].append(NodeProcess(deployment, row["name"], row["role"], row["state"]))
    ordered = sorted(nodes, key=lambda n: (not n.head, _address_key(n.address), n.id))
    return [NodeView(n, tuple(on[n.id])) for n in ordered]


def _address_key(address: str) -> tuple:
    try:
        return (0, int(ipaddress.ip_address(address)))
    except ValueError:
        return (1, address)
