"""One request in flight at the proxy: what it measures while the decode's bytes pass through.

Pure: bytes and times in. The scan looks only for SSE event boundaries, `"choices":[{` (a token
event), the usage chunk and `[DONE]`, so forwarding stays cheap.
"""

from __future__ import annotations

import json
import time

from connector.instances import Route


class Flight:
    """One request in flight: what the proxy measures while it passes the bytes through."""

    __slots__ = (
        "arrival",
        "done_at",
        "end",
        "endpoint",
        "error",
        "last_read",
        "prefill_end",
        "prefill_start",
        "prepared",
        "request_id",
        "route",
        "status",
        "stream",
        "tail",
        "timed_out",
        "token_times",
        "usage_tokens",
        "wall",
    )

    def __init__(self, arrival: float, endpoint: str) -> None:
        self.arrival = arrival
        self.wall = time.time()
        self.endpoint = endpoint
        self.stream = False
        self.route: Route | None = None
        self.request_id = ""
        self.prefill_start: float | None = None
        self.prefill_end: float | None = None
        self.token_times: list[float] = []
        self.usage_tokens: int | None = None
        self.tail = b""
        self.end: float | None = None
        self.done_at: float | None = None  # when `data: [DONE]` passed through
        self.status = 200
        self.error: str | None = None
        self.prepared = False
        self.last_read = arrival
        self.timed_out = False

    def scan(self, chunk: bytes, now: float) -> None:
        """Find complete SSE events in the byte stream; timestamp token events, read usage."""
        data = self.tail + chunk if self.tail else chunk
        start, find = 0, data.find
        while (end := find(b"\n\n", start)) >= 0:
            choices = find(b'"choices":', start, end)
            if choices >= 0 and _opens_list_of_objects(data, choices + 10, end):
                self.token_times.append(now)
            usage = find(b'"usage":', start, end)
            if usage >= 0 and find(b"null", usage + 8, usage + 14) < 0:
                self._read_usage(data[start:end])
            elif end - start < 16 and find(b"[DONE]", start, end) >= 0:
                self.done_at = now
            start = end + 2
        self.tail = data[start:] if start < len(data) else b""

    def _read_usage(self, event: bytes) -> None:
        if not event.startswith(b"data:"):
            return
        try:
            usage = json.loads(event[5:]).get("usage") or {}
        except ValueError:
            return
        if isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]


def _opens_list_of_objects(data: bytes, i: int, end: int) -> bool:
    """True when data[i:] is `[ {` modulo spaces: a non-empty choices list."""
    while i < end and data[i] in b" \t":
        i += 1
    if i >= end or data[i] != 0x5B:  # [
        return False
    i += 1
    while i < end and data[i] in b" \t\r\n":
        i += 1
    return i < end and data[i] == 0x7B  # {
