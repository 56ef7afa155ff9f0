"""Where a layout's engines sit: nodes of a few GPUs each, each engine's TP group inside one
node, and so whether a prefill and a decode share a node (their hand-off's link).

A TP group never spans nodes. vLLM can run one over Ray across nodes, but its all-reduce then
crosses the NICs (50 GB/s a GPU against 450 GB/s of NVLink or 448 of xGMI), and the published
disaggregated setups (llm-d, Dynamo, the MORI-IO post) keep TP inside a node and scale out
with more instances; the timing model has no inter-node all-reduce to charge. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simulator.plan.errors import PlanError

PLACEMENTS = ("pack", "split")


@dataclass(frozen=True, slots=True)
class Nodes:
    """The machines a plan may use: `count` nodes of `gpus_per_node` GPUs.

    pack: engines fill nodes in turn (largest TP first, prefills before decodes at equal TP),
    so a layout that fits one node runs in one node. split: prefills and decodes never share
    a node, every hand-off crosses the inter-node link (as llm-d and Dynamo deploy)."""

    count: int = 1
    gpus_per_node: int = 8
    placement: str = "pack"

    @property
    def gpus(self) -> int:
        return self.count * self.gpus_per_node


@dataclass(frozen=True, slots=True)
class Placement:
    """The node of each engine, in the cluster's order (prefills, decodes, colocated)."""

    prefills: tuple[int, ...] = ()
    decodes: tuple[int, ...] = ()
    colocated: tuple[int, ...] = ()

    def same_node(self, prefill: int, decode: int) -> bool:
        return self.prefills[prefill] == self.decodes[decode]

    @property
    def nodes_used(self) -> int:
        return len({*self.prefills, *self.decodes, *self.colocated})

    def describe(self) -> str:
        """`P0,P1 on node 0; D0 on node 1`: which engines share which node."""
        by_node: dict[int, list[str]] = {}
        for role, nodes in (("P", self.prefills), ("D", self.decodes), ("E", self.colocated)):
            for i, node in enumerate(nodes):
                by_node.setdefault(node, []).append(f"{role}{i}")
        return "; ".join(f"{','.join(names)} on node {n}" for n, names in sorted(by_node.items()))


def place(
    label: str,
    nodes: Nodes,
    prefill_tps: Sequence[int] = (),
    decode_tps: Sequence[int] = (),
    colocated_tps: Sequence[int] = (),
) -> Placement:
    """Each engine's node, first fit; PlanError naming the flag when it cannot be done."""
    for tp in {*prefill_tps, *decode_tps, *colocated_tps}:
        if tp > nodes.gpus_per_node:
            raise PlanError(
                f"--gpus-per-node {nodes.gpus_per_node}: {label} has TP{tp}, and a TP group "
                "never spans nodes (its all-reduce would cross the NICs)"
            )
    free = [nodes.gpus_per_node] * nodes.count
    if nodes.placement == "split" and prefill_tps and decode_tps:
        prefill_at = _first_fit(prefill_tps, free, range(nodes.count))
        taken = set(prefill_at or ())
        decode_at = _first_fit(decode_tps, free, [n for n in range(nodes.count) if n not in taken])
        if prefill_at is None or decode_at is None:
            raise PlanError(
                f"--placement split: {label} needs more than --nodes {nodes.count} of "
                f"{nodes.gpus_per_node} GPUs with prefills and decodes on separate nodes"
            )
        return Placement(tuple(prefill_at), tuple(decode_at))
    engines = [("p", i, tp) for i, tp in enumerate(prefill_tps)]
    engines += [("d", i, tp) for i, tp in enumerate(decode_tps)]
    engines += [("c", i, tp) for i, tp in enumerate(colocated_tps)]
    # Largest TP first: with power-of-two TPs first fit then never strands GPUs.
    order = sorted(range(len(engines)), key=lambda k: -engines[k][2])
    at = _first_fit([engines[k][2] for k in order], free, range(nodes.count))
    if at is None:
        raise PlanError(
            f"--nodes {nodes.count}: {label} does not fit on {nodes.count} node(s) of "
            f"{nodes.gpus_per_node} GPUs (--gpus-per-node)"
        )
    node_of = {engines[k][:2]: node for k, node in zip(order, at, strict=True)}
    return Placement(
        tuple(node_of["p", i] for i in range(len(prefill_tps))),
        tuple(node_of["d", i] for i in range(len(decode_tps))),
        tuple(node_of["c", i] for i in range(len(colocated_tps))),
    )


def _first_fit(tps: Sequence[int], free: list[int], allowed: Iterable[int]) -> list[int] | None:
    """Each TP group on the first allowed node with room (`free` is updated); None: no room."""
    candidates = list(allowed)
    out = []
    for tp in tps:
        node = next((n for n in candidates if free[n] >= tp), None)
        if node is None:
            return None
        free[node] -= tp
        out.append(node)
    return out


class NodesError(PlanError):
    """Nodes, GPUs per node and the GPU budget that do not add up; `field` names the input
    (the CLI's flag is `--` + field with dashes, the API's field is `field`)."""

    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message
        super().__init__(f"--{field.replace('_', '-')} {message}")


MAX_NODES = 64
MAX_GPUS_PER_NODE = 72  # an NVL72 rack is one NVLink domain
MAX_GPUS = 512


def resolve_nodes(
    gpus: int | None,
    nodes: int | None,
    gpus_per_node: int | None,
    profile_gpus_per_node: int,
    default_gpus: int,
) -> tuple[int, int, int | None]:
    """(GPU budget, nodes, GPUs per node) from what was given. No nodes: as many nodes of
    the hardware's size as the budget needs (one node for today's one-node plans, whose
    node is then just `gpus`: None). Nodes without a budget: all their GPUs."""
    for field, value, top in (
        ("nodes", nodes, MAX_NODES),
        ("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE),
        ("gpus", gpus, MAX_GPUS),
    ):
        if value is not None and not 1 <= value <= top:
            raise NodesError(field, f"must be between 1 and {top}, got {value}")
    per_node = gpus_per_node or profile_gpus_per_node
    if nodes is None:
        budget = default_gpus if gpus is None else gpus
        nodes = -(-budget // per_node)
    else:
        budget = nodes * per_node if gpus is None else gpus
        if budget > nodes * per_node:
            raise NodesError(
                "gpus",
                f"{budget} is more than --nodes {nodes} x --gpus-per-node {per_node}",
            )
    if nodes > MAX_NODES:
        raise NodesError("gpus", f"{budget} needs {nodes} nodes of {per_node}; at most {MAX_NODES}")
    return budget, nodes, None if nodes == 1 and gpus_per_node is None else per_node
