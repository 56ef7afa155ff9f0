"""Following a deployment's events over the dashboard's websocket (`/ws/deployments/NAME`):
its `event` frames as the store records them. The socket's close codes (web/routes/live.py)
become the verbs' one-line errors and exit codes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import connect

from terminal import exits
from terminal.client import ApiError
from terminal.config import TOKEN_ENV, Target

OPEN_TIMEOUT_S = 10.0
TICK_S = 0.5  # how often a quiet socket checks the deadline (and Ctrl-C)
MAX_MESSAGE = 32 << 20  # the first message holds up to 30 min of history points
CLOSED = {
    4401: (exits.NOT_ALLOWED, f" (set {TOKEN_ENV})"),
    4404: (exits.FAILED, ""),
    4429: (exits.NOT_ALLOWED, ""),
    1013: (exits.FAILED, ""),
}


def ws_url(server: str, name: str) -> str:
    parts = urlsplit(server)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}{parts.path}/ws/deployments/{quote(name, safe='')}"


def follow(
    target: Target,
    name: str,
    on_open: Callable[[], None],
    on_event: Callable[[dict[str, Any]], None],
    timeout_s: float | None,
) -> None:
    """Call `on_open` once subscribed (so nothing recorded after it is missed), then
    `on_event` for each event until `timeout_s` has passed (None: until interrupted)."""
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
    try:
        ws = connect(
            ws_url(target.server, name),
            additional_headers=headers,
            open_timeout=OPEN_TIMEOUT_S,
            max_size=MAX_MESSAGE,
            proxy=None,
        )
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        raise ApiError(
            f"--server {target.server}: cannot follow its events ({exc})", exits.UNREACHABLE
        ) from None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with ws:
        opened = False
        while deadline is None or time.monotonic() < deadline:
            left = TICK_S if deadline is None else min(TICK_S, deadline - time.monotonic())
            try:
                message = json.loads(ws.recv(timeout=max(left, 0.01)))
            except TimeoutError:
                continue
            except ConnectionClosed as closed:
                raise closed_error(closed) from None
            if not opened:
                on_open()
                opened = True
            if message.get("type") == "event":
                on_event(message)


def closed_error(closed: ConnectionClosed) -> ApiError:
    frame = closed.rcvd
    code, why = (frame.code, frame.reason) if frame is not None else (1006, "")
    exit_code, hint = CLOSED.get(code, (exits.UNREACHABLE, ""))
    said = why or "the server closed the event stream"
    return ApiError(f"{said}{hint} (websocket close {code})", exit_code)
