"""Where each process of a deployment was placed, kept in the store (state/placement_store.py):
every process when the deployment starts, the one that moved when the supervisor replaces an
instance on another node (its "replaced" event).

`rows_of` and `moved` are pure; `PlacementLog` is the thin shell: the supervisor's event sink
(every event still goes to the store's events) and the service's hook at a start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from controller.launch.placement import PROXY, Node, Placed, planned
from controller.spec.deployment import DeploymentSpec
from state.placement_store import PlacedProcess

if TYPE_CHECKING:
    from controller.supervise.supervisor import Supervisor

REPLACED = "replaced"  # the supervisor's event when an instance moves off a lost node
# (actor, kind, message, deployment, detail) -> None: how events reach the store.
Recorder = Callable[[str, str, str, str | None, dict | None], object]  # Store.record


class PlacementBook(Protocol):
    """What the log asks of the store."""

    def keep(
        self, deployment: str, placed: Iterable[PlacedProcess], *, whole: bool = False
    ) -> None: ...

    def of(self, deployment: str) -> Sequence[Any]: ...


def rows_of(spec: DeploymentSpec, placed: Placed | None, home: Node | None) -> list[PlacedProcess]:
    """The proxy and every instance of `spec` on its node: `placed`'s on a cluster, else all
    on `home` (one host). A process with no node yet is left out."""
    gpus = {i.name: i.gpus for i in planned(spec)}
    names = [PROXY, *gpus]
    nodes: Mapping[str, Node] = (
        placed.nodes if placed is not None else dict.fromkeys(names, home) if home else {}
    )
    return [
        PlacedProcess(name, nodes[name].id, nodes[name].address, gpus.get(name, 0.0))
        for name in names
        if name in nodes
    ]


def moved(stored: Iterable[Any], now: Iterable[PlacedProcess]) -> list[PlacedProcess]:
    """The processes of `now` whose node (or GPUs) differ from the `stored` rows, or that
    have none stored."""
    before = {r.process: (r.node_id, r.node_address, r.gpus) for r in stored}
    return [p for p in now if before.get(p.process) != (p.node_id, p.node_address, p.gpus)]


class PlacementLog:
    """The supervisor's event sink: records every event, and on "replaced" keeps the new node
    of what moved. `watch(supervisor)` once it is built (its adoption emits before)."""

    def __init__(self, record: Recorder, book: PlacementBook) -> None:
        self.record, self.book = record, book
        self.supervisor: Supervisor | None = None

    def watch(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def __call__(self, actor: str, kind: str, message: str, deployment: str | None) -> None:
        self.record(actor, kind, message, deployment, None)
        if kind == REPLACED and deployment is not None and self.supervisor is not None:
            dep = self.supervisor.deployments.get(deployment)
            if dep is not None:
                now = rows_of(dep.spec, dep.placed, None)
                self.book.keep(deployment, moved(self.book.of(deployment), now))

    def started(
        self, name: str, spec: DeploymentSpec, placed: Placed | None, home: Node | None
    ) -> None:
        """A start: every process where it runs now, and nothing the spec no longer has."""
        self.book.keep(name, rows_of(spec, placed, home), whole=True)
