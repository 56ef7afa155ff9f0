"""The deployment page's "where each TTFT went" panel: the window's slowest requests with their
parts and a stacked chart of the parts over the window, from the proxy's request log
(observe/ttft_breakdown.py does the arithmetic), polled as a fragment."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from domain.measures.ttft_parts import PARTS
from observe.frames import WINDOW_SECONDS
from observe.ttft_breakdown import recomputing_decodes, series, slowest, window_rows
from web import htmx
from web.deps import StoreDep, get_observer
from web.proxy_log import proxy_log
from web.views.page import PageActor, deployment_or_404, page_context

page_router = APIRouter(tags=["pages"], include_in_schema=False)


@page_router.get("/deployments/{name}/ttft", response_class=HTMLResponse)
async def ttft_fragment(
    request: Request, name: str, store: StoreDep, actor: PageActor, window: str = Query("1m")
) -> HTMLResponse:
    deployment_or_404(store, name)
    window = window if window in WINDOW_SECONDS else "1m"
    entries, why = await proxy_log(request, name)
    observer = get_observer(request)
    frame = observer.frame(name, window) if observer is not None else None
    xfer = frame["kv"]["xfer_p50_ms"] if frame else None
    recomputing = recomputing_decodes(frame)
    ctx = page_context(
        request, actor, **panel(entries, time.time(), window, xfer, why, recomputing)
    )
    return htmx.fragment(request, "ttft.html", "ttft", ctx)


def panel(
    entries: list[dict[str, Any]],
    now: float,
    window: str,
    xfer_p50_ms: float | None,
    why: str | None = None,
    recomputing: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The panel's context: the slowest rows and the chart's bars (percent of the tallest)."""
    seconds = WINDOW_SECONDS[window]
    rows = window_rows(entries, now, seconds, xfer_p50_ms, recomputing)
    bars = series(rows, now, seconds)
    top = max((sum(b[p] for p in PARTS) for b in bars), default=0.0) or 1.0
    for bar in bars:
        bar["heights"] = {p: 100.0 * bar[p] / top for p in PARTS}
    return {
        "ttft_window": window,
        "ttft_rows": slowest(rows),
        "ttft_bars": bars,
        "ttft_parts": PARTS,
        "ttft_requests": len(rows),
        "ttft_why": why,
    }
