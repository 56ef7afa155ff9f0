"""The web's leaves of pdctl's error tree (domain/errors.py documents the whole tree) and the
one renderer: every error, raised by a route, a dependency, FastAPI's validation or a
middleware, is answered by `render`, in the format the client asked for:

- an htmx request (`HX-Request`): an error fragment, the page's notice, swapped in place of
  the one the page has (`HX-Retarget: #notice`), so the region that asked stays as it was;
- a client preferring `application/json` (`Accept`), or one stating no preference of a
  route that is not a page (the API, /metrics): `{"detail": ...}`, a message, or FastAPI's
  422 items naming each field;
- a client preferring `text/html` (a browser), or one stating none of a page: the error page.

Forms are not errors: a form answers its own 422 with each problem at its field.
"""

from __future__ import annotations

from http import HTTPStatus

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse, JSONResponse, Response

from domain.errors import (  # noqa: F401  (the tree's branches, importable from the web)
    BadRequest,
    ConfigError,
    Conflict,
    InvalidTransition,
    NotFound,
    PdctlError,
    Problem,
    SpecInvalid,
    TooManyRequests,
    Unavailable,
    UpstreamError,
    UpstreamTimeout,
)
from state.errors import ChangeInProgress, StaleRevision, Unreadable  # noqa: F401
from web import htmx
from web.database import faults as storage


class Unauthorized(PdctlError):
    status = 401
    title = "Unauthorized"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(PdctlError):
    status = 403
    title = "Forbidden"


class TooLarge(PdctlError):
    status = 413
    title = "Request body too large"


class NotJson(PdctlError):
    status = 415
    title = "Unsupported media type"


class RequestInvalid(ConfigError):
    """FastAPI's own 422 (a parameter or body its models refuse), as the tree's: each item's
    loc starts with where it was (body, query, path)."""

    title = "Invalid request"

    def __init__(self, items: list[dict]) -> None:
        super().__init__([Problem(tuple(i["loc"][1:]), i["msg"], i["type"]) for i in items])
        self.items = items

    def detail(self) -> object:
        return self.items


class HttpError(PdctlError):
    """A framework HTTPException (an unknown path, a method not allowed), as the tree's."""

    def __init__(self, exc: HTTPException) -> None:
        super().__init__(str(exc.detail))
        self.status, self.title = exc.status_code, HTTPStatus(exc.status_code).phrase
        self._detail, self._headers = exc.detail, dict(exc.headers or {})

    def detail(self) -> object:
        return self._detail

    def headers(self) -> dict[str, str]:
        return self._headers


class ErrorOut(BaseModel):
    detail: str


# What any /api operation may answer besides its own success and FastAPI's 422, documented in
# the OpenAPI so clients (and schemathesis) know every status they can get.
API_RESPONSES: dict[int | str, dict] = {
    400: {"model": ErrorOut, "description": "A malformed header (If-Match)."},
    401: {"model": ErrorOut, "description": "No token, or an unknown one."},
    403: {"model": ErrorOut, "description": "A viewer token asking to change something."},
    404: {"model": ErrorOut, "description": "No such deployment, revision, instance."},
    409: {"model": ErrorOut, "description": "Conflicts with the current state; says why."},
    413: {"model": ErrorOut, "description": "Request body over the configured limit."},
    415: {"model": ErrorOut, "description": "A request body that is not JSON."},
    429: {
        "model": ErrorOut,
        "description": "Too many unknown tokens from this address; "
        "Retry-After says when to try again.",
    },
    503: {
        "model": ErrorOut,
        "description": "No controller runs in this control plane, or its cluster does not "
        "answer now.",
    },
}


def response(error: PdctlError) -> JSONResponse:
    """The JSON answer: `{"detail": ...}` with the error's status and headers."""
    return JSONResponse(
        {"detail": error.detail()}, status_code=error.status, headers=error.headers()
    )


def wants(request: Request) -> str:
    """ "fragment", "json" or "page": what this client should get for an error."""
    if htmx.is_htmx(request):
        return "fragment"
    accept = _accepted(request.headers.get("accept", ""))
    html, json = accept.get("text/html", 0.0), accept.get("application/json", 0.0)
    if html != json:
        return "page" if html > json else "json"
    return "page" if _serves_html(request) else "json"


def _serves_html(request: Request) -> bool:
    """True when the route that took the request answers HTML (a page, not the API)."""
    kind = getattr(request.scope.get("route"), "response_class", None)
    kind = getattr(kind, "value", kind)  # FastAPI's DefaultPlaceholder around JSONResponse
    return isinstance(kind, type) and issubclass(kind, HTMLResponse)


def _accepted(header: str) -> dict[str, float]:
    """Each media type of an Accept header with its q (wildcards give their q to the types
    they cover, when those are not named)."""
    named: dict[str, float] = {}
    wildcard = 0.0
    for part in header.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = next((_q(p[2:]) for p in params if p.startswith("q=")), 1.0)
        if media in ("*/*", "text/*", "application/*"):
            wildcard = max(wildcard, q)
        elif media:
            named[media.lower()] = q
    return {t: named.get(t, wildcard) for t in ("text/html", "application/json")}


def _q(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        return 0.0


def render(request: Request, error: PdctlError) -> Response:
    """The one place an error becomes a response."""
    kind = wants(request)
    if kind == "json":
        return response(error)
    context = {
        "static": htmx.STATIC_FILES,
        "actor": getattr(request.state, "actor", None),
        "auth": request.app.state.tokens.enabled,
        "title": error.title,
        "message": error.message,
        "status": error.status,
    }
    if kind == "fragment":
        answer = htmx.fragment(request, "error.html", "notice", context, error.status)
        htmx.retarget(answer, "#notice", "outerHTML")
    else:
        answer = htmx.page(request, "error.html", context, error.status)
    answer.headers.update(error.headers())
    return answer


async def _handle(request: Request, exc: Exception) -> Response:
    if isinstance(exc, PdctlError):
        return render(request, exc)
    if isinstance(exc, RequestValidationError):
        # Without `input` and `ctx`: an input echoed back can be NaN (which JSON cannot carry:
        # FastAPI's own handler then fails with a 500), megabytes, or a secret.
        items = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return render(request, RequestInvalid(items))
    if isinstance(exc, HTTPException):
        if exc.status_code < 400:  # a redirect (to /login): no body to render
            return Response(status_code=exc.status_code, headers=exc.headers)
        return render(request, HttpError(exc))
    raise exc  # registered for the three above only


async def _storage(request: Request, exc: Exception) -> Response:
    """A full disk or a damaged database: said so, not a bare 500 (web/database/faults.py)."""
    said = storage.classify(exc)
    if said is None:
        raise exc
    storage.log.error("%s %s: %s", request.method, request.url.path, exc)
    return render(request, said)


def install(app: FastAPI) -> None:
    for kind in (PdctlError, RequestValidationError, HTTPException):
        app.add_exception_handler(kind, _handle)
    for failure in (sa.exc.DBAPIError, OSError):
        app.add_exception_handler(failure, _storage)
