"""Prefill interference seen from the proxy: does a request's ITL spike line up with another
request's prefill finishing on the same engine?

In colocated serving a prefill shares the engine step with the running decodes: the step that
computes request B's prompt ends with B's first token and, at the same moment, with the next
token of every request it stalled. So a gap of request A that is far above A's own median and
ends when some other request's first token came out of the same instance is a stall by prefill
work; a spike with no such first token (a disaggregated decode, a preemption, the network) is
not. The advisor's `spike_prefill_overlap` is the share of spikes that line up.

Pure: times in (the proxy's monotonic clock), counts out.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import pairwise

SPIKE_FACTOR = 2.0  # a gap above this many times the request's median gap is a spike
SLACK_S = 0.005  # first tokens of one engine step reach the proxy within a few ms
KEEP_S = 600.0  # prefill times kept per instance (longer than any request's decode)


class Interference:
    def __init__(self, keep_s: float = KEEP_S, slack_s: float = SLACK_S) -> None:
        self.keep_s, self.slack_s = keep_s, slack_s
        self._prefills: dict[str, list[float]] = {}

    def prefill_done(self, instance: str, at: float) -> None:
        """A request's first token came out of `instance` at `at`: its prefill ended there."""
        times = self._prefills.setdefault(instance, [])
        if times and at < times[-1]:
            bisect.insort(times, at)
        else:
            times.append(at)
        if times[0] < at - 2 * self.keep_s:  # prune now and then, not on every call
            del times[: bisect.bisect_left(times, at - self.keep_s)]

    def forget(self, instance: str) -> None:
        self._prefills.pop(instance, None)

    def spikes(
        self, instance: str, token_times: Sequence[float], ordered: Sequence[float] = ()
    ) -> tuple[int, int]:
        """(ITL spikes of one request served by `instance`, those a prefill lines up with);
        `ordered`: the request's gaps sorted, when the caller has them."""
        if len(token_times) < 4:  # fewer than 3 gaps: too few to judge
            return 0, 0
        ordered = ordered or sorted(b - a for a, b in pairwise(token_times))
        threshold = SPIKE_FACTOR * ordered[len(ordered) // 2]  # above the median gap
        if ordered[-1] <= threshold:  # the largest gap is no spike: none is
            return 0, 0
        prefills = self._prefills.get(instance, [])
        spikes = lined_up = 0
        for start, end in pairwise(token_times):
            if end - start <= threshold:
                continue
            spikes += 1
            i = bisect.bisect_right(prefills, start)
            if i < len(prefills) and prefills[i] <= end + self.slack_s:
                lined_up += 1
        return spikes, lined_up
