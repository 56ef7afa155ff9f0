"""The advisor's verdicts on one deployment's live frame and the history of its window: what
`GET /api/deployments/{name}/advice`, the advisor panel, the trade panel and the proposals
read (observe/advice/signals.py derives the signals, observe/advice/advisor.py judges them)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request

from controller import Engine
from observe.advice import signals
from observe.frames import WINDOW_SECONDS
from observe.scrape.settings import kv_bytes_per_token
from state.history import History
from state.store import Store
from web.deps import get_observer


def live(request: Request, store: Store, name: str, window: str) -> dict[str, Any]:
    """Advice from the deployment's latest frame and the history of that window."""
    spec = store.get(name).spec  # NotFound: 404
    observer = get_observer(request)
    frame = observer.frame(name, window) if observer is not None else None
    points = (
        History(store.engine).read(name, time.time() - WINDOW_SECONDS[window])
        if frame is not None
        else []
    )
    derived = signals.from_frame(
        frame,
        points,
        topology=spec.topology.value,
        slo={"ttft_ms": spec.slo.ttft_ms, "itl_ms": spec.slo.itl_ms},
        kv_bytes_per_token=kv_bytes_per_token(spec.model),
        time_scale=spec.time_scale if spec.engine is Engine.SIM else 1.0,
    )
    return {
        "deployment": name,
        "window": window,
        "live": frame is not None,
        "ts": frame["ts"] if frame else None,
        **signals.advice(derived),
    }
