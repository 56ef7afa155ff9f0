"""Where `pdctl top` gets its data: the deployment's websocket (`/ws/deployments/{name}`, the
dashboard's own frames; web/routes/watch/live.py), reconnected with capped, jittered backoff when
the server goes away, and the few REST reads around it (the deployments, recent events, the
instances' status while no frame comes).

A close the server means (4401 no valid token, 4404 no such deployment, 4400 bad window,
4403/4421/4429 refused) ends the feed with `FeedClosed`: one line and an exit code. Anything
else (a restart, 1013 too many sockets, a refused or dropped connection) is retried."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.sync.client import connect

from terminal import exits
from terminal.client import ApiClient, ApiError
from terminal.config import TOKEN_ENV, Target
from terminal.event_stream import ws_url as event_ws_url
from terminal.reconnect import backoff

OPEN_TIMEOUT_S = 5.0
MAX_MESSAGE_BYTES = 16 << 20
DRAIN_AT_ONCE = 64  # messages taken per poll, so a burst after a stall cannot starve the keys


class FeedClosed(RuntimeError):
    """The server closed the feed for a reason retrying will not fix."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def closed_for_good(code: int, reason: str, target: Target, name: str) -> FeedClosed | None:
    """The FeedClosed a close code means, or None when it is worth reconnecting."""
    if code == 4401:
        hint = "" if target.token else f" (set {TOKEN_ENV})"
        return FeedClosed(
            f"{reason or 'a valid viewer or operator token is required'}{hint}", exits.NOT_ALLOWED
        )
    if code == 4404:
        return FeedClosed(reason or f"no deployment named {name!r}", exits.FAILED)
    if code == 4400:
        return FeedClosed(reason or "bad window", exits.USAGE)
    if code in (4403, 4421, 4429):
        return FeedClosed(f"refused by {target.server}: {reason or code}", exits.NOT_ALLOWED)
    return None


def ws_url(server: str, name: str, window: str) -> str:
    return f"{event_ws_url(server, name)}?window={window}"


@dataclass
class Feed:
    """One deployment's frames over one window; `poll` never blocks past its timeout (but
    for the connect itself, bounded by OPEN_TIMEOUT_S)."""

    target: Target
    deployment: str
    window: str
    opener: Callable[..., Any] = connect  # the websocket seam
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    status: str = "connecting"  # short, for the header: live, retrying in 2 s ...
    opens: int = 0  # connections made so far
    last_error: str | None = None  # why it is not connected (None once it is)
    _ws: Any = None
    _attempt: int = 0
    _next_at: float = 0.0
    _frames: int = field(default=0, repr=False)

    def poll(self, timeout: float) -> list[dict[str, Any]]:
        """The messages that came within `timeout` (JSON objects, oldest first)."""
        if self._ws is None:
            wait = self._next_at - self.clock()
            if wait > 0:
                self.status = f"retrying in {math.ceil(wait)} s"
                self.sleep(min(timeout, wait))
                return []
            self._open()
            return []
        out: list[dict[str, Any]] = []
        try:
            for _ in range(DRAIN_AT_ONCE):
                raw = self._ws.recv(timeout=timeout if not out else 0)
                message = _json(raw)
                if message is not None:
                    out.append(message)
        except TimeoutError:
            pass
        except ConnectionClosed as closed:
            self._closed(closed)
        if out:
            self._attempt = 0  # it served: the next drop starts the backoff afresh
            if any(m.get("type") == "frame" for m in out):
                self.status = "live"
        return out

    def _open(self) -> None:
        headers = {"Authorization": f"Bearer {self.target.token}"} if self.target.token else {}
        url = ws_url(self.target.server, self.deployment, self.window)
        try:
            self._ws = self.opener(
                url,
                additional_headers=headers,
                open_timeout=OPEN_TIMEOUT_S,
                proxy=None,
                max_size=MAX_MESSAGE_BYTES,
                compression=None,
            )
        except InvalidStatus as exc:
            self._retry(f"{self.target.server} answered {exc.response.status_code}")
        except (InvalidHandshake, InvalidURI) as exc:
            self._retry(f"{self.target.server}: no websocket ({exc})")
        except (OSError, TimeoutError) as exc:
            self._retry(f"cannot reach {self.target.server} ({_why(exc)})")
        else:
            self.opens += 1
            self.last_error = None
            self.status = "connected, waiting for a frame"

    def _closed(self, closed: ConnectionClosed) -> None:
        self._ws = None
        code = closed.rcvd.code if closed.rcvd else 1006
        reason = closed.rcvd.reason if closed.rcvd else ""
        fatal = closed_for_good(code, reason, self.target, self.deployment)
        if fatal is not None:
            raise fatal
        self._retry(f"disconnected ({code}{': ' + reason if reason else ''})")

    def _retry(self, why: str) -> None:
        self._ws = None
        self.last_error = why
        delay = backoff(self._attempt)
        self._attempt += 1
        self._next_at = self.clock() + delay
        self.status = f"retrying in {math.ceil(delay)} s"

    @property
    def ever_connected(self) -> bool:
        return self.opens > 0

    def close(self) -> None:
        if self._ws is not None:
            ws, self._ws = self._ws, None
            ws.close()


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _json(raw: str | bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(raw)
    except ValueError:
        return None  # not ours (the dashboard's socket carries only JSON today)
    return message if isinstance(message, dict) else None


# -- the REST reads ------------------------------------------------------------------------


def deployment_names(client: ApiClient) -> list[str]:
    return [d["name"] for d in client.get("/api/deployments") or []]


def recent_events(client: ApiClient, name: str, limit: int) -> list[dict[str, Any]]:
    """The deployment's latest events, oldest first; [] when they cannot be read now."""
    try:
        newest_first = client.get("/api/events", deployment=name, limit=limit) or []
    except ApiError:
        return []
    return list(reversed(newest_first))


def unit_status(client: ApiClient, name: str) -> list[dict[str, Any]] | None:
    """The instances' status rows; None when the deployment is not supervised (never
    started) or the server cannot say."""
    try:
        return client.get(f"/api/deployments/{quote(name, safe='')}/status")
    except ApiError:
        return None
