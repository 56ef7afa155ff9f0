"""Pure: which instances are hung, from when their legs last read a byte (`now` comes in).

A leg waiting for its first byte past the first-byte deadline says little alone: a busy
engine's queue, a long prompt's prefill or a KV pull may hold it. The instance is hung only
when nothing of it moved in that time either: no byte on any of its streams and no answer to
any of its legs. A busy engine streams or answers its other requests meanwhile, so this
cannot fire there; a stopped, deadlocked or wedged one moves nothing. Streams that all went
silent that long (a stall mid-stream) say the same of their instance.

A lone long prompt moves nothing either while it is prefilled: a 100k-token prompt keeps an
otherwise idle engine silent for tens of seconds. So a leg may wait longer by the work it
asked (`grace`, from its prompt's size), and its instance with it: the deadline grows with
the prompt, at a floor prefill speed no serving engine falls below.

A leg that is not streamed has no first byte before its whole answer: a healthy engine
generating it moves nothing either. Its wait grows by the answer it asked for too
(`answer_grace`), at a floor decode speed; one that set no bound may take the engine's whole
context, so it is given that much.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Prefill at 1,000 prompt tokens/s: far below any GPU engine and a CPU engine on a small
# model; an engine slower than that needs a longer --first-byte-timeout.
GRACE_S_PER_PROMPT_TOKEN = 1e-3


# Decode at 10 tokens/s for one request: far below a serving engine's per-request speed even
# in a full batch (a CPU engine on a small model included).
GRACE_S_PER_ANSWER_TOKEN = 0.1
# What a request that sets no max_tokens may generate: the engine fills its context.
UNBOUNDED_ANSWER_TOKENS = 32_768


def answer_grace(streamed: bool, max_tokens: int | None) -> float:
    """How much longer a leg whose first byte is its whole answer (not streamed) may wait:
    the answer it asked for (`max_tokens`, None: unbounded) at the floor decode speed."""
    if streamed:
        return 0.0
    tokens = UNBOUNDED_ANSWER_TOKENS if max_tokens is None else max(0, max_tokens)
    return tokens * GRACE_S_PER_ANSWER_TOKEN


def prompt_grace(prompt_tokens: int) -> float:
    """How much longer than the first-byte deadline a leg for a prompt of this many tokens
    (the proxy's estimate at arrival: connector/legs/client_body.py) may take to answer."""
    return max(0, prompt_tokens) * GRACE_S_PER_PROMPT_TOKEN


@dataclass(frozen=True, slots=True)
class LegSeen:
    """One leg in flight, as the watchdog sees it."""

    url: str  # its instance
    waiting_since: float | None  # no byte yet, counted from then; None: it is streaming
    last_read: float  # its last byte (a streaming leg's)
    grace: float = 0.0  # longer it may wait for its first byte: the work it asked for


def kv_lost(refused_at: float, prefill_end: float, due: float, now: float) -> bool:
    """A read-mode decode leg still waiting past its deadline (`due`: its first-byte wait plus
    grace) whose prefill refused a connection after answering it: the KV it was to pull died
    with that process. vLLM's NIXL keeps such a transfer in progress for ever, so the leg
    would wait out the decode timeout. Judged by the request, not by its decode: the decode
    is not hung, and it may take the retry."""
    return refused_at > prefill_end and now > due


def hung_instances(
    legs: Iterable[LegSeen], moved: Mapping[str, float], now: float, first: float
) -> set[str]:
    """The instances with a leg overdue for its first byte, or with streams that all went
    silent, while nothing of them moved for `first` s. A waiting leg is overdue past `first`
    plus its grace, and not before any leg that waited longer on its instance is (a long
    prompt ahead of it keeps it waiting too; later arrivals never push an earlier one back).
    `moved`: when each instance last answered or streamed on a leg that has ended."""
    latest: dict[str, float] = {}
    suspect: set[str] = set()
    waiting: list[LegSeen] = []
    for leg in legs:
        last = latest.get(leg.url, moved.get(leg.url, float("-inf")))
        if leg.waiting_since is None:
            latest[leg.url] = max(last, leg.last_read)
            suspect.add(leg.url)  # a stream: judged by its instance's silence
            continue
        latest[leg.url] = last
        waiting.append(leg)
    due: dict[str, float] = {}  # the latest deadline of the legs waiting longest, so far
    for leg in sorted(waiting, key=lambda seen: seen.waiting_since or 0.0):
        since = leg.waiting_since or 0.0
        due[leg.url] = max(due.get(leg.url, float("-inf")), since + first + leg.grace)
        if now > due[leg.url]:
            suspect.add(leg.url)
    return {url for url in suspect if now - latest[url] > first}
