"""Pure: which node each process of a deployment runs on, and so the address it is reached at.

`planned(spec)` is the spec-to-instances step every renderer shares (the controller's launches,
the compose file, the Kubernetes manifests): one entry per instance with its group, role, mode,
GPUs and node selectors. `place` matches those to a cluster's nodes (controller backends list
them: one for local processes, Ray's for a Ray cluster); every error names the spec field it
is about, as the API's 422s do.

Choice: an instance that already runs keeps its node; a new one goes to a matching node with
room for its GPUs, preferring the node with the fewest of this deployment's instances (so a
prefill and its decode land apart when they can), then the most free GPUs, then the address.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from controller.spec.deployment import DeploymentSpec, InstanceGroup, Role
from controller.spec.field_error import FieldError
from controller.spec.placement import NodeSelector

PROXY = "proxy"


class PlacementError(FieldError):
    """No node for a process: located at the spec field that asks for the impossible."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a cluster as a backend sees it."""

    id: str
    address: str
    gpus: float = math.inf  # total; inf: not counted (one host, ids given by hand)
    gpus_free: float = math.inf
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    alive: bool = True
    head: bool = False

    def describe(self) -> str:
        return f"{self.address} (node {self.id[:12]})"

    def matches(self, selector: NodeSelector) -> bool:
        if selector.node_id and not self.id.startswith(selector.node_id):
            return False
        if selector.address and selector.address != self.address:
            return False
        if any(self.resources.get(k, 0.0) < v for k, v in selector.resources.items()):
            return False
        return all(self.labels.get(k) == v for k, v in selector.labels.items())


@dataclass(frozen=True, slots=True)
class PlannedInstance:
    """One instance of the spec, before it has a node."""

    name: str
    group: InstanceGroup
    group_index: int
    index: int

    @property
    def role(self) -> Role:
        return self.group.role

    @property
    def gpus(self) -> float:
        """GPUs a cluster must give it: placement's count, else its ids, else its TP size
        (0 for the stand-in and for vLLM on CPU, which name none)."""
        placement = self.group.placement
        if placement is not None and placement.gpus_per_instance is not None:
            return placement.gpus_per_instance
        return float(len(self.group.instance_gpus(self.index)))

    @property
    def selectors(self) -> list[NodeSelector]:
        return list(self.group.placement.nodes) if self.group.placement else []


def planned(spec: DeploymentSpec) -> list[PlannedInstance]:
    """Every instance of `spec` in start order (groups in order, then index)."""
    return [
        PlannedInstance(f"{g.name}-{i}", g, gi, i)
        for gi, g in enumerate(spec.groups)
        for i in range(g.count)
    ]


@dataclass(frozen=True, slots=True)
class Addresses:
    """Where each process of a deployment listens and is reached: its node's address."""

    default: str
    by_name: Mapping[str, str] = field(default_factory=dict)  # instance name or "proxy"

    def of(self, name: str) -> str:
        return self.by_name.get(name, self.default)


@dataclass(frozen=True, slots=True)
class Placed:
    """The node of every process of one deployment."""

    nodes: Mapping[str, Node]  # instance name or "proxy" -> node

    def addresses(self, default: str) -> Addresses:
        return Addresses(default, {name: node.address for name, node in self.nodes.items()})

    def node_ids(self) -> dict[str, str]:
        return {name: node.id for name, node in self.nodes.items()}


def place(
    spec: DeploymentSpec,
    nodes: list[Node],
    *,
    home: Node,
    keep: Mapping[str, str] | None = None,
    multi_node: bool = False,
) -> Placed:
    """A node for the proxy and for every instance; PlacementError naming the field if one
    cannot have one. `home` is the control plane's node (the proxy's unless the spec says);
    `keep` maps processes already running to their node id (they stay, already counted in
    the nodes' free GPUs)."""
    keep = keep or {}
    alive = sorted((n for n in nodes if n.alive), key=lambda n: _address_key(n.address))
    by_id = {n.id: n for n in alive}
    free = {n.id: n.gpus_free for n in alive}
    count = {n.id: 0 for n in alive}
    chosen: dict[str, Node] = {PROXY: _proxy_node(spec, alive, home, keep, by_id)}
    counted = any(not math.isinf(n.gpus) for n in alive)
    for inst in planned(spec):
        loc = ("groups", inst.group_index, "placement")
        if counted and inst.group.gpus:
            raise PlacementError(
                ("groups", inst.group_index, "gpus"),
                "on a cluster the backend assigns GPU ids on each node: give "
                "placement.gpus_per_instance instead of gpus",
            )
        if inst.group.placement and inst.group.placement.nodes_per_instance > 1 and not multi_node:
            raise PlacementError(
                (*loc, "nodes_per_instance"),
                f"one instance of {inst.group.name} across "
                f"{inst.group.placement.nodes_per_instance} nodes (multi-node TP) is not "
                "supported by this backend yet; `pdctl deploy k8s` renders it as a "
                "LeaderWorkerSet",
            )
        kept = by_id.get(keep.get(inst.name, ""))
        if kept is not None:
            chosen[inst.name] = kept
            count[kept.id] += 1
            continue
        node = _pick(inst, alive, free, count, loc)
        chosen[inst.name] = node
        free[node.id] -= inst.gpus
        count[node.id] += 1
    _check_reachable(chosen)
    return Placed(chosen)


def _proxy_node(
    spec: DeploymentSpec,
    alive: list[Node],
    home: Node,
    keep: Mapping[str, str],
    by_id: Mapping[str, Node],
) -> Node:
    if (kept := by_id.get(keep.get(PROXY, ""))) is not None:
        return kept
    selector = spec.proxy.node
    if selector is None:
        return home
    for node in alive:
        if node.matches(selector):
            return node
    raise PlacementError(
        ("proxy", "node"),
        f"no live node matches {selector.describe()}; the cluster has {_listing(alive)}",
    )


def _pick(
    inst: PlannedInstance,
    alive: list[Node],
    free: Mapping[str, float],
    count: Mapping[str, int],
    loc: tuple,
) -> Node:
    selectors = inst.selectors
    matching = [n for n in alive if not selectors or any(n.matches(s) for s in selectors)]
    if not matching:
        wanted = "; ".join(s.describe() for s in selectors)
        raise PlacementError(
            (*loc, "nodes"),
            f"no live node matches {wanted}; the cluster has {_listing(alive)}",
        )
    need = inst.gpus
    big_enough = [n for n in matching if n.gpus >= need]
    if not big_enough:
        largest = max(n.gpus for n in matching)
        raise PlacementError(
            (*loc, "gpus_per_instance"),
            f"{inst.name} needs {need:g} GPUs on one node and fits on no node: the largest "
            f"node it may use has {largest:g}",
        )
    roomy = [n for n in big_enough if free[n.id] >= need]
    if not roomy:
        have = ", ".join(f"{n.address} has {max(0.0, free[n.id]):g} free" for n in big_enough)
        raise PlacementError(
            (*loc, "gpus_per_instance"),
            f"{inst.name} needs {need:g} free GPUs on one node: {have}",
        )
    return min(roomy, key=lambda n: (count[n.id], -free[n.id], _address_key(n.address)))


def _check_reachable(chosen: Mapping[str, Node]) -> None:
    """A loopback address is reached only from its own machine: a proxy or engine listening
    on one cannot be reached from a node with a routable address (nor the reverse, whose
    engines would hand KV to a machine they cannot see)."""
    proxy = chosen[PROXY]
    for name, node in chosen.items():
        if name != PROXY and _loopback(node.address) != _loopback(proxy.address):
            raise PlacementError(
                ("proxy", "node"),
                f"the proxy on {proxy.describe()} and {name} on {node.describe()} cannot "
                "reach each other (one address is loopback, the other is not): place the "
                "proxy on a node every instance can reach",
            )


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _address_key(address: str) -> tuple:
    try:
        return (0, int(ipaddress.ip_address(address)))
    except ValueError:
        return (1, address)


def _listing(nodes: list[Node]) -> str:
    if not nodes:
        return "no live node"
    return ", ".join(
        f"{n.address} ({'GPUs not counted' if math.isinf(n.gpus) else f'{n.gpus:g} GPUs'})"
        for n in nodes
    )
