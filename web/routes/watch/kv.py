"""The KV calculator: a prompt's KV-cache bytes and how long they take to move over the RDMA
NICs, inside a node (GPU peer-to-peer, or through host memory without it) and over a given
link, and the hand-off part by part on each path. `GET /api/kv` and the page `/tools/kv`
answer from simulator/model/calculator.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from domain import profiles
from domain.kv_connectors import all_backends, proxy_backend, proxy_names
from simulator.model.calculator import kv_report
from web import htmx
from web.views.form_fields import errors_at_fields, pydantic_detail
from web.views.page import PageActor, page_context

router = APIRouter(tags=["tools"])  # under /api, behind a token
page_router = APIRouter(tags=["pages"], include_in_schema=False)

FIELDS = (
    "model",
    "tokens",
    "hardware",
    "tp",
    "link_gbps",
    "p2p",
    "connector",
    "block_size",
    "decode_step_ms",
)
# The connectors the calculator offers: the proxy's (domain/kv_connectors/).
CONNECTOR_CHOICES = tuple((b.proxy_name, b.label) for b in all_backends() if b.proxy_name)


def _proxy_connector(name: str) -> str:
    if name not in proxy_names():
        raise ValueError(f"Input should be one of {', '.join(proxy_names())}")
    return name


class KvQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str = Field("llama-3.1-70b", description="a model profile name")
    tokens: int = Field(10_000, ge=1, le=10_000_000, description="prompt tokens")
    hardware: str = Field("h100", description="a hardware profile name")
    tp: int = Field(1, ge=1, le=64, description="TP ranks: one RDMA NIC each")
    link_gbps: float | None = Field(None, gt=0, le=100_000, description="a link of your own, GB/s")
    p2p: bool | None = Field(
        None,
        description="GPU peer-to-peer inside the node; default: what the hardware profile says",
    )
    connector: Annotated[str, AfterValidator(_proxy_connector)] = Field(
        "nixl", description="the KV connector", json_schema_extra={"enum": list(proxy_names())}
    )
    block_size: int | None = Field(
        None, ge=1, le=4096, description="KV block size in tokens; default: vLLM's for the device"
    )
    decode_step_ms: float | None = Field(
        None, ge=0, le=1e6, description="the decode's step; default: modelled at batch 32"
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, name: str) -> str:
        return _known("models", name)

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, name: str) -> str:
        return _known("hardware", name)

    @field_validator("link_gbps", "p2p", "block_size", "decode_step_ms", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if value == "" else value  # an empty form field


def _known(kind: str, name: str) -> str:
    known = profiles.available(kind)
    if name not in known:
        raise ValueError(f"unknown {kind} profile {name!r}; known: {', '.join(known)}")
    return name


def report(q: KvQuery) -> dict[str, Any]:
    hw = profiles.hardware(q.hardware)
    if q.p2p is not None:
        hw = replace(hw, p2p=q.p2p)
    return {
        **kv_report(
            profiles.model(q.model),
            hw,
            q.tokens,
            q.tp,
            q.link_gbps,
            proxy_backend(q.connector).connector,
            q.block_size,
            q.decode_step_ms,
        ),
        "hardware": q.hardware,
        "tp": q.tp,
        "p2p": hw.p2p,
    }


@router.get("/kv")
def kv(q: Annotated[KvQuery, Query()]) -> dict[str, Any]:
    """KV bytes of a prompt, its transfer time (ms) over each path, and the hand-off's parts
    (setup, descriptor posting, staging, wire, the decode noticing) per path."""
    return report(q)


@page_router.get("/tools/kv", response_class=HTMLResponse)
def kv_page(request: Request, actor: PageActor) -> HTMLResponse:
    raw = {k: v for k, v in request.query_params.items() if k in FIELDS}
    errors: dict[str, list[str]] = {}
    result = None
    try:
        result = report(KvQuery.model_validate(raw))
    except ValidationError as exc:
        errors, _ = errors_at_fields(pydantic_detail(exc.errors(include_url=False)), FIELDS)
    values = {**KvQuery.model_construct().model_dump(), **raw}
    ctx = page_context(
        request,
        actor,
        v=values,
        result=result,
        errors=errors,
        models=profiles.available("models"),
        hardware=profiles.available("hardware"),
        connectors=CONNECTOR_CHOICES,
    )
    status = 422 if errors else 200
    if htmx.is_htmx(request):
        return htmx.fragment(request, "kv.html", "kv_result", ctx, status)
    return htmx.page(request, "kv.html", ctx, status)
