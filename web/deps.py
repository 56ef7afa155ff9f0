"""FastAPI dependencies as Annotated aliases, so handlers read like sentences. The one way
routes reach what the lifespan built (web/app.py): the store, the hub, the controller's
service, the observer, the load and bench runs, the placements."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from starlette.requests import HTTPConnection

from controller import STRATEGY_SUMMARY, ControlService
from domain import finite
from observe.scrape.observer import Observer
from services.bench_runs.runs import BenchRuns
from services.load import LoadRuns
from state.hub import Hub
from state.placement_store import PlacementStore
from state.store import Store
from web import errors
from web.errors import Forbidden, NotJson, Unauthorized
from web.security.auth import ANONYMOUS, COOKIE, Actor, TokenBook, bearer
from web.security.device import DEVICE_COOKIE
from web.settings import Settings

# The largest integer SQLite stores (a signed 64-bit INTEGER): every integer a request may
# name (a revision, a count) is bounded by it, so a larger one is a 422 naming its field,
# never an OverflowError and a 500 (issue 39).
INT64_MAX = 2**63 - 1
RevisionNumber = Annotated[int, Path(ge=1, le=INT64_MAX, description="A revision's number")]


class Unavailable(errors.Unavailable):
    title = "Controller unavailable"


# Each takes the connection, so websockets and helpers called with a request use them too.


def get_controller(conn: HTTPConnection) -> ControlService | None:
    """The controller's service when one runs in this process, else None."""
    return conn.app.state.controller


def get_service(conn: HTTPConnection) -> ControlService:
    """The controller's service; 503 when this control plane runs without one."""
    controller = conn.app.state.controller
    if controller is None:
        raise Unavailable("this control plane runs without a controller")
    return controller


def get_store(conn: HTTPConnection) -> Store:
    return conn.app.state.store


def get_placements(conn: HTTPConnection) -> PlacementStore:
    return conn.app.state.placements


def get_hub(conn: HTTPConnection) -> Hub:
    return conn.app.state.hub


def get_observer(conn: HTTPConnection) -> Observer | None:
    return conn.app.state.observer


def get_load_runs(conn: HTTPConnection) -> LoadRuns:
    return conn.app.state.load_runs


def get_bench_runs(conn: HTTPConnection) -> BenchRuns:
    return conn.app.state.bench_runs


def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings


def current_actor(request: Request) -> Actor:
    book: TokenBook = request.app.state.tokens
    if not book.enabled:
        return ANONYMOUS
    secret = bearer(request.headers.get("authorization")) or request.cookies.get(COOKIE)
    if not secret:
        raise Unauthorized(
            "a token is required: send 'Authorization: Bearer <token>' or sign in at /login"
        )
    actor = book.check(
        secret,
        request.client.host if request.client else "unknown",
        request.cookies.get(DEVICE_COOKIE),
    )
    if actor is None:
        raise Unauthorized("unknown token")
    return actor


async def json_body(request: Request) -> None:
    """A body sent to the API is JSON: anything else is a 415 saying so, rather than a 422
    about the body's shape. Its numbers are finite: NaN or Infinity anywhere (or 1e999,
    which reads as Infinity) is a 422 naming each place, whatever the route's model."""
    headers = request.headers
    if request.method not in ("POST", "PUT", "PATCH") or (
        headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers
    ):
        return
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise NotJson(
            f"the request body must be JSON (Content-Type: application/json), not "
            f"{media or 'untyped'}"
        )
    try:
        body = await request.json()  # parsed already by FastAPI: Starlette keeps it
    except ValueError:
        return  # FastAPI's own 422 says the JSON is invalid
    if bad := finite.problems(body):
        raise RequestValidationError(bad)


def current_operator(actor: Annotated[Actor, Depends(current_actor)]) -> Actor:
    if not actor.may_change:
        raise Forbidden(f"{actor.label} may only read; changes need an operator token")
    return actor


StoreDep = Annotated[Store, Depends(get_store)]
HubDep = Annotated[Hub, Depends(get_hub)]
PlacementsDep = Annotated[PlacementStore, Depends(get_placements)]
ControllerDep = Annotated[ControlService | None, Depends(get_controller)]
ServiceDep = Annotated[ControlService, Depends(get_service)]
ObserverDep = Annotated[Observer | None, Depends(get_observer)]
LoadRunsDep = Annotated[LoadRuns, Depends(get_load_runs)]
BenchRunsDep = Annotated[BenchRuns, Depends(get_bench_runs)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
Viewer = Annotated[Actor, Depends(current_actor)]
Operator = Annotated[Actor, Depends(current_operator)]
Reason = Annotated[
    str | None, Query(max_length=500, description="Why: kept with the revision and the event.")
]

# How a rollout changes instances (controller/rollout/strategies.py); None: roll where the
# layout allows it, else hold.
StrategyQuery = Annotated[
    Literal["roll", "hold", "recreate"] | None,
    Query(
        description="; ".join(f"{k}: {STRATEGY_SUMMARY[k]}" for k in ("roll", "hold", "recreate"))
        + ". Default: roll where the layout allows it, else hold, else recreate."
    ),
]
