"""Live data of one deployment: the websocket `/ws/deployments/{name}` (history first, then a
frame a second and events as they are recorded) and `/api/deployments/{name}/history`.

Messages are JSON text: {"type": "history", "points": [...]}, {"type": "frame", ...} (the
shape in observe/frames.py) and {"type": "event", ...} (as /api/events gives them).
The token comes as `Authorization: Bearer`, the login cookie, or `?token=` (kept out of the
logs by web/process/serve_logs.py). Close codes: 4401 no valid token, 4429 too many unknown
tokens from this address, 4403 a cross-origin handshake (web/security/csrf.py), 4421 a Host this
server does not answer to without tokens (web/security/hosts.py), 4404 no such deployment, 4400 bad
window, 1013 too many live connections (try again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect

from observe.frames import WINDOWS
from observe.scrape.topics import DEFAULT_WINDOW, event_topic, frame_topic
from state.history import History
from state.hub import encode
from web.deps import HubDep, ObserverDep, StoreDep
from web.errors import NotFound
from web.security.auth import COOKIE, TokenBook, TooManyAttempts, bearer
from web.security.device import DEVICE_COOKIE

router = APIRouter(tags=["live"])  # under /api, behind a token
ws_router = APIRouter(tags=["live"])

HELLO_HISTORY_S = 30 * 60.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(window: str) -> float | None:
    """'90', '90s', '15m', '2h', '1d' in seconds; None when it is none of those."""
    match = _DURATION.match(window.strip())
    return float(match[1]) * _UNITS[match[2]] if match else None


@router.get("/deployments/{name}/history")
def history(
    name: str,
    store: StoreDep,
    window: Annotated[
        str, Query(pattern=_DURATION.pattern, description="how far back: 90s, 15m, 2h, 1d")
    ] = "1h",
) -> dict[str, Any]:
    """The stored points (observe/build.py `point`), oldest first, one per few seconds."""
    if name not in store.names():
        raise NotFound(f"no deployment named {name!r}")
    points = History(store.engine).read(name, time.time() - (seconds(window) or 0.0))
    return {"deployment": name, "window": window, "points": points}


@ws_router.websocket("/ws/deployments/{name}")
async def live(
    ws: WebSocket,
    name: str,
    store: StoreDep,
    hub: HubDep,
    observer: ObserverDep,
    window: str = DEFAULT_WINDOW,
    token: str | None = None,
) -> None:
    app = ws.app
    await ws.accept()
    if not await _authenticated(ws, app.state.tokens, token):
        return
    if window not in WINDOWS:
        await ws.close(4400, f"window is one of {', '.join(WINDOWS)}")
        return
    if name not in await asyncio.to_thread(store.names):
        await ws.close(4404, f"no deployment named {name!r}")
        return
    limit = app.state.settings.max_websockets
    if hub.subscribers() >= limit:
        await ws.close(1013, f"too many live connections (limit {limit}); try again later")
        return
    with hub.subscribe([frame_topic(name, window), event_topic(name)]) as sub:
        points = await asyncio.to_thread(
            History(store.engine).read, name, time.time() - HELLO_HISTORY_S
        )
        await ws.send_text(
            encode({"type": "history", "deployment": name, "window": window, "points": points})
        )
        frame = observer.frame(name, window) if observer is not None else None
        if frame is not None:
            await ws.send_text(encode(frame))
        await _pump(ws, sub)


async def _authenticated(ws: WebSocket, book: TokenBook, token: str | None) -> bool:
    """True when the socket may go on; otherwise it is closed saying why."""
    if not book.enabled:
        return True
    secret = bearer(ws.headers.get("authorization")) or token or ws.cookies.get(COOKIE)
    try:
        client = ws.client.host if ws.client else "unknown"
        if secret and book.check(secret, client, ws.cookies.get(DEVICE_COOKIE)):
            return True
    except TooManyAttempts as exc:
        await ws.close(4429, exc.message)
        return False
    await ws.close(4401, "a valid viewer or operator token is required")
    return False


async def _pump(ws: WebSocket, sub) -> None:
    """Send what the hub queues until the client goes; a reader notices the close."""

    async def drain_incoming() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                await ws.receive_text()

    reader = asyncio.create_task(drain_incoming())
    getter: asyncio.Future | None = None
    try:
        while True:
            getter = asyncio.ensure_future(sub.get())
            done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                break
            await ws.send_text(getter.result())
    except (WebSocketDisconnect, RuntimeError):
        pass  # the client went while we were sending
    finally:
        for task in (getter, reader):
            if task is not None:
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
            await reader
