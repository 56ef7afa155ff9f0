"""The control plane's error tree, turned into JSON `{"detail": ...}` in one place (`install`).

    PdctlError              500  anything the control plane itself cannot do
     +- Unauthorized        401  no token, or an unknown one (carries WWW-Authenticate)
     +- Forbidden           403  a viewer token asking to change something
     +- NotFound            404  no such deployment, revision
     +- Conflict            409  a name already taken, a port range with no room left
     +- TooLarge            413  a request body over the configured limit
     +- SpecInvalid         422  rules broken in a deployment spec; FastAPI's 422 shape

Route code raises these; nothing else builds error responses.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

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


class TooLarge(PdctlError):
    status = 413
    title = "Request body too large"


class SpecInvalid(PdctlError):
    status = 422
    title = "Invalid deployment"

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(p.msg for p in problems))
        self.problems = list(problems)

    def detail(self) -> object:
        # The same items FastAPI puts in its own 422s: loc starts at "body".
        return [{"loc": ["body", *p.loc], "msg": p.msg, "type": p.type}
                for p in self.problems]


def response(error: PdctlError) -> JSONResponse:
    return JSONResponse({"detail": error.detail()}, status_code=error.status,
                        headers=error.headers())


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, PdctlError):  # registered for PdctlError only
        raise exc
    return response(exc)


def install(app: FastAPI) -> None:
    app.add_exception_handler(PdctlError, _handle)
