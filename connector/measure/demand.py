"""The work each client request brings, counted as it arrives (pure): its prompt tokens and
the answer tokens it will cost, so the autopilot can see the workload's mix change at the
moment it changes rather than a backlog later (controller/autopilot/decide.py, demand).

At arrival the proxy knows only the body: about 4 characters a prompt token
(connector/client_body.estimate_tokens) and the `max_tokens` asked for. Each finished request
shows what those really were (its usage), so each estimate is scaled by the ratio the
finished ones showed: decayed sums, so a workload whose text or stopping changes is followed
within a few dozen requests, and a ratio of 1 until the first usage.
"""

from __future__ import annotations

DECAY = 0.05  # weight of the newest finished request in the ratios
KINDS = ("prompt", "output")


class ArrivalDemand:
    """Tokens of the requests that arrived (`tokens`, counters) and the ratios that scale an
    arrival's estimate to them (`ratio`)."""

    __slots__ = ("_estimated", "_used", "ratio", "tokens")

    def __init__(self) -> None:
        self.tokens = dict.fromkeys(KINDS, 0.0)
        self.ratio = dict.fromkeys(KINDS, 1.0)
        self._estimated = dict.fromkeys(KINDS, 0.0)
        self._used = dict.fromkeys(KINDS, 0.0)

    def arrived(self, prompt_estimate: int, output_asked: int) -> None:
        tokens, ratio = self.tokens, self.ratio
        tokens["prompt"] += prompt_estimate * ratio["prompt"]
        tokens["output"] += output_asked * ratio["output"]

    def finished(self, kind: str, estimate: int, used: int | None) -> None:
        """A served request's estimate at arrival against its usage (None: none was sent)."""
        if used is None or estimate <= 0 or used < 0:
            return
        keep = 1.0 - DECAY
        est = self._estimated[kind] = self._estimated[kind] * keep + estimate
        got = self._used[kind] = self._used[kind] * keep + used
        self.ratio[kind] = got / est
