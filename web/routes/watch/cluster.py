"""Where things run: `GET /api/cluster/nodes` (every node the controller's backend sees, its
GPUs and what runs on it; one node, this host, on local processes), `GET
/api/deployments/{name}/placement` (where each process of a deployment was last placed), and
the page `/cluster`."""

from __future__ import annotations

import math
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from controller import NodeView
from state.models import Placement
from web import htmx
from web.deps import PlacementsDep, ServiceDep, StoreDep, get_service
from web.views.page import PageActor, page_context

router = APIRouter(tags=["cluster"])  # under /api, behind a token
page_router = APIRouter(tags=["pages"], include_in_schema=False)


class NodeProcessOut(BaseModel):
    deployment: str
    process: str = Field(description='An instance name, or "proxy".')
    role: str = Field(description="prefill | decode | colocated | proxy")
    state: str = Field(description="The supervisor's state of the process (RUNNING, ...).")


class NodeOut(BaseModel):
    id: str = Field(description='The Ray node id ("local" for this host on local processes).')
    address: str = Field(description="The address its processes bind and are reached at.")
    alive: bool
    head: bool = Field(description="The Ray head node (this host on local processes).")
    gpus: float | None = Field(description="GPUs in total; null: not counted (one host).")
    gpus_free: float | None = Field(description="GPUs no process holds; null: not counted.")
    resources: dict[str, float] = Field(description="Custom resources it advertises.")
    labels: dict[str, str]
    processes: list[NodeProcessOut] = Field(description="What runs on it now.")

    @classmethod
    def of(cls, view: NodeView) -> NodeOut:
        node = view.node
        return cls(
            id=node.id,
            address=node.address,
            alive=node.alive,
            head=node.head,
            gpus=_counted(node.gpus),
            gpus_free=_counted(node.gpus_free),
            resources=dict(node.resources),
            labels=dict(node.labels),
            processes=[
                NodeProcessOut(
                    deployment=p.deployment, process=p.process, role=p.role, state=p.state
                )
                for p in view.processes
            ],
        )


def _counted(gpus: float) -> float | None:
    return None if math.isinf(gpus) else gpus


class PlacedOut(BaseModel):
    process: str = Field(description='An instance name, or "proxy".')
    node_id: str
    node_address: str
    gpus: float = Field(description="GPUs it was given there (0: none, as the stand-in).")
    placed_at: datetime = Field(description="When it was placed there (a start, or a move).")

    @classmethod
    def of(cls, row: Placement) -> PlacedOut:
        return cls(
            process=row.process,
            node_id=row.node_id,
            node_address=row.node_address,
            gpus=row.gpus,
            placed_at=row.placed_at,
        )


class PlacementOut(BaseModel):
    deployment: str
    processes: list[PlacedOut] = Field(
        description="Where each process was last placed: at its last start, or where it "
        "moved when its node died; empty if it was never started."
    )


@router.get("/cluster/nodes")
async def cluster_nodes(controller: ServiceDep) -> list[NodeOut]:
    """Every node the controller's backend sees, with its GPUs and what runs on it; 503 if
    the cluster does not answer now."""
    return [NodeOut.of(view) for view in await controller.cluster()]


@router.get("/deployments/{name}/placement")
def placement(name: str, store: StoreDep, placements: PlacementsDep) -> PlacementOut:
    """Where each process of `name` was last placed (kept across restarts of the plane)."""
    store.stored(name)  # 404 naming it
    return PlacementOut(
        deployment=name, processes=[PlacedOut.of(row) for row in placements.of(name)]
    )


@page_router.get("/cluster", response_class=HTMLResponse)
async def cluster_page(request: Request, actor: PageActor) -> HTMLResponse:
    nodes = await cluster_nodes(get_service(request))
    ctx = page_context(request, actor, nodes=nodes)
    if htmx.is_htmx(request):
        return htmx.fragment(request, "cluster.html", "nodes", ctx)
    return htmx.page(request, "cluster.html", ctx)
