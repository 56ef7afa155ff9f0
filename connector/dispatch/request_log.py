"""The proxy's recent-requests log: what each finished request leaves behind, built into its
JSON line only when someone reads the log (GET /admin/requests, the dashboard), not per request.

An entry keeps the request's figures (numbers and the small dicts already made for them), not
its token times or ITL samples: the log holds its last `request_log_size` requests however
long the proxy runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from connector.dispatch.flight import Flight
from connector.measure.timing import RequestTiming, itl_figures
from domain.measures.ttft_parts import TtftParts

__all__ = ["LoggedRequest", "RequestLog"]


class LoggedRequest:
    """One finished request, as the log keeps it until read."""

    __slots__ = (
        "attempts",
        "canary",
        "decode",
        "e2e",
        "endpoint",
        "error",
        "group",
        "itl_stats",
        "met",
        "outcome",
        "output_tokens",
        "parts",
        "prefill",
        "prefill_leg",
        "prompt_tokens",
        "request_id",
        "status",
        "stream",
        "time",
        "tpot",
        "transfer",
        "ttft",
    )

    def __init__(
        self,
        flight: Flight,
        outcome: str,
        timing: RequestTiming | None,
        met: dict[str, bool],
        canary: bool = False,
    ) -> None:
        route = flight.route
        self.time, self.request_id, self.endpoint = flight.wall, flight.request_id, flight.endpoint
        self.stream, self.outcome, self.status = flight.stream, outcome, flight.status
        self.error, self.attempts, self.canary = flight.error, flight.attempts, canary
        self.group = route.group if route else None
        self.prefill = route.prefill.url if route and route.prefill else None
        self.decode = route.decode.url if route else None
        self.met = met
        # as the engine counted it (its usage); None when the answer carried no usage
        self.prompt_tokens = flight.usage_prompt
        self.ttft: float | None = None
        if timing is not None:
            self.ttft, self.e2e, self.tpot = timing.ttft, timing.e2e, timing.tpot
            self.itl_stats = timing.itl_stats or itl_figures(timing.itls)
            self.output_tokens, self.prefill_leg = timing.output_tokens, timing.prefill_leg
            self.transfer = timing.transfer_first_decode
            self.parts: TtftParts | None = timing.parts

    def to_json(self) -> dict[str, Any]:
        """The log line, as GET /admin/requests returns it."""
        entry: dict[str, Any] = {
            "time": self.time,
            "request_id": self.request_id,
            "endpoint": self.endpoint,
            "stream": self.stream,
            "group": self.group,
            "prefill": self.prefill,
            "decode": self.decode,
            "outcome": self.outcome,
            "status": self.status,
            "error": self.error,
        }
        if self.attempts:
            entry["retries"] = len(self.attempts)
            entry["attempts"] = self.attempts
        if self.ttft is not None:
            itls = self.itl_stats
            entry.update(
                output_tokens=self.output_tokens,
                prompt_tokens=self.prompt_tokens,
                ttft_ms=self.ttft * 1000,
                e2e_ms=self.e2e * 1000,
                tpot_ms=_ms(self.tpot),
                itl_mean_ms=_ms(itls["mean"]),
                itl_p99_ms=_ms(itls["p99"]),
                itl_max_ms=_ms(itls["max"]),
                prefill_ms=_ms(self.prefill_leg),
                transfer_first_decode_ms=_ms(self.transfer),
                slo=dict(self.met),
            )
            if self.parts is not None:
                entry["ttft_parts"] = self.parts.to_json()
        if self.canary:
            entry["canary"] = True
        return entry


class RequestLog:
    """The last `size` requests, oldest first; reading an entry (index or iteration) gives its
    JSON line."""

    def __init__(self, size: int) -> None:
        self._entries: deque[LoggedRequest] = deque(maxlen=size)
        self.append = self._entries.append

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self._entries[index].to_json()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (entry.to_json() for entry in self._entries)

    def last(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` lines, oldest first (none for a limit of 0 or less)."""
        if limit <= 0:
            return []
        n = len(self._entries)
        return [self._entries[i].to_json() for i in range(max(0, n - limit), n)]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
