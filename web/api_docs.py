"""The API's description (/openapi.json) and its pages (/docs, /redoc), behind the same token
as the API they describe: FastAPI's own routes for them answer anyone, which told a caller
with no token every route, parameter and schema of a control plane that has tokens set
(issue 39). Without tokens, everyone is the operator and they answer as before."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from web.deps import current_actor

router = APIRouter(dependencies=[Depends(current_actor)], include_in_schema=False)
OPENAPI = "/openapi.json"


@router.get(OPENAPI)
def openapi(request: Request) -> JSONResponse:
    app: FastAPI = request.app
    return JSONResponse(app.openapi())


@router.get("/docs")
def swagger() -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=OPENAPI, title="pdctl - API")


@router.get("/redoc")
def redoc() -> HTMLResponse:
    return get_redoc_html(openapi_url=OPENAPI, title="pdctl - API")
