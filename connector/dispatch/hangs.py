"""Pure: which instances are hung, from when their legs last read a byte (`now` comes in).

A leg waiting for its first byte past the first-byte deadline says little alone: a busy
engine's queue, a long prompt's prefill or a KV pull may hold it. The instance is hung only
when nothing of it moved in that time either: no byte on any of its streams and no answer to
any of its legs. A busy engine streams or answers its other requests meanwhile, so this
cannot fire there; a stopped, deadlocked or wedged one moves nothing. Streams that all went
silent that long (a stall mid-stream) say the same of their instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LegSeen:
    """One leg in flight, as the watchdog sees it."""

    url: str  # its instance
    waiting_since: float | None  # no byte yet, counted from then; None: it is streaming
    last_read: float  # its last byte (a streaming leg's)


def hung_instances(
    legs: Iterable[LegSeen], moved: Mapping[str, float], now: float, first: float
) -> set[str]:
    """The instances with a leg waiting past `first` for its first byte, or with streams
    that all went silent, while nothing of them moved for `first` s. `moved`: when each
    instance last answered or streamed on a leg that has ended."""
    latest: dict[str, float] = {}
    suspect: set[str] = set()
    for leg in legs:
        last = latest.get(leg.url, moved.get(leg.url, float("-inf")))
        if leg.waiting_since is None:
            latest[leg.url] = max(last, leg.last_read)
            suspect.add(leg.url)  # a stream: judged by its instance's silence
            continue
        latest[leg.url] = last
        if now - leg.waiting_since > first:
            suspect.add(leg.url)
    return {url for url in suspect if now - latest[url] > first}
