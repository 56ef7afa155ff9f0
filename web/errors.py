"""The control plane's error tree, turned into JSON `{"detail": ...}` in one place (`install`).

    PdctlError              500  anything the control plane itself cannot do
     +- BadRequest          400  a header the API reads, malformed (If-Match)
     +- HostRefused         400  a Host not allowed without tokens (web/hosts.py)
     +- Unauthorized        401  no token, or an unknown one (carries WWW-Authenticate)
     +- Forbidden           403  a viewer token asking to change something
     +- NotFound            404  no such deployment, revision
     +- Conflict            409  a name already taken, a port range with no room left
     |   +- Unreadable      409  a stored revision today's rules cannot read (replace it)
     |   +- StaleRevision   409  an edit based on a revision that is no longer current
     +- TooLarge            413  a request body over the configured limit
     +- NotJson             415  a request body the API reads, sent as something else than JSON
     +- SpecInvalid         422  rules broken in a deployment spec; FastAPI's 422 shape

Route code raises these; nothing else builds error responses.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from controller.validation import Problem


class PdctlError(Exception):
    status = 500
    title = "Internal error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def detail(self) -> object:
        return self.message

    def headers(self) -> dict[str, str]:
        return {}


class BadRequest(PdctlError):
    status = 400
    title = "Bad request"


class Unauthorized(PdctlError):
    status = 401
    title = "Unauthorized"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(PdctlError):
    status = 403
    title = "Forbidden"


class NotFound(PdctlError):
    status = 404
    title = "Not found"


class Conflict(PdctlError):
    status = 409
    title = "Conflict"


class Unreadable(Conflict):
    title = "Stored revision cannot be read"

    def __init__(self, name: str, revision: int, field: str, why: str) -> None:
        super().__init__(
            f"deployment {name!r} revision {revision} as stored cannot be read ({field}: "
            f"{why}); replace it (PUT /api/deployments/{name} or the edit form) or delete it"
        )
        self.name, self.revision = name, revision


class StaleRevision(Conflict):
    title = "Edited from an old revision"

    def __init__(self, message: str, current: int) -> None:
        super().__init__(message)
        self.current = current

    def headers(self) -> dict[str, str]:
        return {"ETag": f'"{self.current}"'}


class TooLarge(PdctlError):
    status = 413
    title = "Request body too large"


class NotJson(PdctlError):
    status = 415
    title = "Unsupported media type"


class SpecInvalid(PdctlError):
    status = 422
    title = "Invalid deployment"

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(p.msg for p in problems))
        self.problems = list(problems)

    def detail(self) -> object:
        # The same items FastAPI puts in its own 422s: loc starts at "body".
        return [{"loc": ["body", *p.loc], "msg": p.msg, "type": p.type} for p in self.problems]


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
    503: {"model": ErrorOut, "description": "No controller runs in this control plane."},
}


def response(error: PdctlError) -> JSONResponse:
    return JSONResponse(
        {"detail": error.detail()}, status_code=error.status, headers=error.headers()
    )


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, PdctlError):  # registered for PdctlError only
        raise exc
    return response(exc)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 items without `input` and `ctx`: an input echoed back can be NaN (which
    JSON cannot carry: FastAPI's own handler then fails with a 500), megabytes, or a secret."""
    if not isinstance(exc, RequestValidationError):  # registered for it only
        raise exc
    items = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
    return JSONResponse({"detail": items}, status_code=422)


def install(app: FastAPI) -> None:
    app.add_exception_handler(PdctlError, _handle)
    app.add_exception_handler(RequestValidationError, _invalid)
