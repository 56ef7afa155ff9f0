"""FastAPI dependencies as Annotated aliases, so handlers read like sentences."""

from __future__ import annotations

from typing import Annotated, Protocol

from fastapi import Depends, Query, Request
from fastapi.exceptions import RequestValidationError

from domain import finite
from state.store import Store
from web.auth import ANONYMOUS, COOKIE, Actor, TokenBook, bearer
from web.device import DEVICE_COOKIE
from web.errors import Forbidden, NotJson, Unauthorized
from web.settings import Settings


class ControllerHook(Protocol):
    """What the routes ask of the controller, when one runs in this process
    (`app.state.controller`); the lifecycle routes will ask more."""

    def is_active(self, name: str) -> bool:
        """True while any instance of deployment `name` is not stopped."""
        ...


def get_controller(request: Request) -> ControllerHook | None:
    return request.app.state.controller


def get_store(request: Request) -> Store:
    return request.app.state.store


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
ControllerDep = Annotated[ControllerHook | None, Depends(get_controller)]
SettingsDep = Annotated[Settings, Depends(get_app_settings)]
Viewer = Annotated[Actor, Depends(current_actor)]
Operator = Annotated[Actor, Depends(current_operator)]
Reason = Annotated[
    str | None, Query(max_length=500, description="Why: kept with the revision and the event.")
]
