"""Following a deployment's events over the dashboard's websocket (`/ws/deployments/NAME`):
its `event` frames as the store records them. A close the server means (no token, no such
deployment, refused; web/routes/watch/live.py) becomes the verb's one-line error and exit code; a
restart or a dropped connection is ridden out as `pdctl top` does (terminal/reconnect.py),
and `on_open` runs again on each new socket so the events missed meanwhile are read."""

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
from terminal.reconnect import Reconnect

OPEN_TIMEOUT_S = 10.0
TICK_S = 0.5  # how often a quiet socket checks the deadline (and Ctrl-C)
MAX_MESSAGE = 32 << 20  # the first message holds up to 30 min of history points
CLOSED = {
    4401: (exits.NOT_ALLOWED, f" (set {TOKEN_ENV})"),
    4404: (exits.FAILED, ""),
    4429: (exits.NOT_ALLOWED, ""),
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
    retry: Reconnect | None = None,
) -> None:
    """Call `on_open` once subscribed (so nothing recorded after it is missed; again after
    each reconnect), then `on_event` for each event until `timeout_s` has passed (None: until
    interrupted). The first socket must open; later drops are retried by `retry`."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    retry = retry or Reconnect("events")
    retry.deadline = deadline
    ws = _connect(target, name)
    while True:
        try:
            with ws:
                _listen(ws, on_open, on_event, deadline, retry)
            return  # the deadline
        except ApiError as lost:
            retry.lost(lost)  # anything but a lost server ends the follow
        ws = None
        while ws is None:
            if _past(deadline):
                return
            try:
                ws = _connect(target, name)
            except ApiError as exc:
                retry.lost(exc)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _connect(target: Target, name: str) -> Any:
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
    try:
        return connect(
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


def _listen(
    ws: Any,
    on_open: Callable[[], None],
    on_event: Callable[[dict[str, Any]], None],
    deadline: float | None,
    retry: Reconnect,
) -> None:
    """One socket's events until the deadline; an ApiError when it closes."""
    opened = False
    while not _past(deadline):
        left = TICK_S if deadline is None else min(TICK_S, deadline - time.monotonic())
        try:
            message = json.loads(ws.recv(timeout=max(left, 0.01)))
        except TimeoutError:
            continue
        except ConnectionClosed as closed:
            raise closed_error(closed) from None
        if not opened:
            on_open()
            retry.served()
            opened = True
        if message.get("type") == "event":
            on_event(message)


def closed_error(closed: ConnectionClosed) -> ApiError:
    frame = closed.rcvd
    code, why = (frame.code, frame.reason) if frame is not None else (1006, "")
    exit_code, hint = CLOSED.get(code, (exits.UNREACHABLE, ""))
    said = why or "the server closed the event stream"
    return ApiError(f"{said}{hint} (websocket close {code})", exit_code)
