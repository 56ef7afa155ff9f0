"""The supervisor's placement: asks its backend for the nodes, runs controller/launch/placement.py,
remembers the result in the run dir, and turns a node into what a spawn needs. On one host
(the local backend) the spec's selectors are still checked against this host, but nothing is
rendered differently: processes bind and are reached at the host's address as always."""

from __future__ import annotations

from pathlib import Path

from controller.backends.local import ProcessBackend, Where
from controller.launch.placement import Addresses, Node, Placed, place, planned
from controller.launch.render import gpu_env_name
from controller.spec.deployment import DeploymentSpec
from controller.supervise import run_state


async def place_deployment(
    backend: ProcessBackend, spec: DeploymentSpec, keep: Placed | None, alive: set[str]
) -> Placed | None:
    """Where every process of `spec` goes (PlacementError naming the field if somewhere it
    cannot); processes in `alive` keep their node. None on one host."""
    nodes = await backend.nodes()
    kept = {n: node.id for n, node in (keep.nodes.items() if keep else ()) if n in alive}
    placed = place(spec, nodes, home=backend.home(nodes), keep=kept, multi_node=backend.multi_node)
    return placed if backend.clustered else None


def addresses(placed: Placed | None, default: str) -> Addresses | None:
    return placed.addresses(default) if placed is not None else None


def save(folder: Path, placed: Placed | None) -> None:
    if placed is not None:
        run_state.write_placement(
            folder,
            {n: {"id": node.id, "address": node.address} for n, node in placed.nodes.items()},
        )


def load(folder: Path, backend: ProcessBackend) -> Placed | None:
    """The placement a previous supervisor saved (nodes as they were then)."""
    if not backend.clustered:
        return None
    saved = run_state.read_placement(folder)
    if not saved:
        return None
    return Placed({n: Node(v["id"], v["address"]) for n, v in saved.items()})


def where(spec: DeploymentSpec, placed: Placed | None, name: str) -> Where | None:
    """What the backend needs to start process `name`: its node and GPUs."""
    if placed is None or name not in placed.nodes:
        return None
    gpus = next((i.gpus for i in planned(spec) if i.name == name), 0.0)
    return Where(placed.nodes[name], gpus, gpu_env_name(spec))


def node_lost(placed: Placed | None, name: str, nodes: list[Node]) -> Node | None:
    """The node `name` was placed on, if that node is no longer alive."""
    if placed is None or name not in placed.nodes:
        return None
    node = placed.nodes[name]
    live = {n.id for n in nodes if n.alive}
    return None if node.id in live else node


def keep_dropped(placed: Placed | None, before: Placed | None, units: set[str]) -> Placed | None:
    """`placed`, plus the nodes of processes it has no place for that still run (a rollout
    stops them later): their launches keep naming the node they run on."""
    if placed is None or before is None:
        return placed
    extra = {n: node for n, node in before.nodes.items() if n in units and n not in placed.nodes}
    return Placed({**placed.nodes, **extra}) if extra else placed
