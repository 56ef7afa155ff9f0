"""Pure: when a failed attempt of a disaggregated request may be tried again, and how; the
retry budget. No I/O and no clock of its own (`now` comes in), so every rule is a unit test.

A retry is safe only while no byte has reached the client: the client then sees one answer,
the one attempt that served, with exactly the tokens it asked for. The decision table:

    leg      cause                            retry?   the next attempt
    -------  -------------------------------  -------  -----------------------------------------
    any      the first byte reached client    never    the stream ends with an error event
    any      the engine refused the body      never    the client's 4xx (its request, not a fault)
    prefill  refused, reset, 5xx, garbage,    yes      another prefill of the same group; a new
             timeout                                   request id (MoRIIO: a new transfer_id);
                                                       write mode: the pair
    prefill  kv_lost: it refused a connection yes      another prefill, the same decode may
             after it answered, and the                serve (it is not at fault)
             decode leg has sent nothing
             past its first-byte deadline
    decode   refused (nothing was sent, so    yes      another decode; NIXL read: the same
             nothing was pulled)                       kv_transfer_params; MoRIIO: a fresh
                                                       prefill (a new transfer_id); write: the pair
    any      409: a stale role/epoch (the      yes      as for refused (it ran nothing), past the
             instance changed role)                    budget's tokens and the request's
                                                       attempts: a routing event
    decode   reset, 5xx, garbage, no first    yes      another decode with a fresh prefill (the
             byte within its deadline,                 KV may have been pulled, or the pull is
             silent before its first byte              what hangs); write mode: the pair

and every retry also needs: attempts left (`attempts` per request, the first included), the
request younger than `deadline_s`, and a token in the budget (each request adds `ratio`, at
least `min_per_s` accrue each second): when every instance fails, retries stay a bounded
share of the traffic instead of multiplying it.

How many tokens are saved at most is what lets a spare absorb a hung instance: `burst` plus
`ratio` times the requests of the last `deadline_s` (only they may still be retried). A hung
instance is found `first_byte` s after its legs stopped moving; by then it holds its share of
that window's requests, at most a half with a spare (one of two), and every one of them needs
a retry at once. The saved tokens cover it while ratio x deadline_s >= first_byte / 2: 0.2 x
30 s = 6 >= 10 s / 2 = 5 with the defaults (`covers_a_hang`), plus `burst`. A fixed cap (10)
refused most of such a burst at any real rate (issue 39). Traffic that began less than a window
before the hang has saved less; so a retry off an instance already out of routing (ejected as
hung, refusing, down) needs no token at all (`why_not`'s `moved_off`): it moves a request
from an instance that does no work to one that does, and adds no load to a failing one. The
budget bounds what it is for: retries onto instances that are still in routing and failing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from domain.kv_connectors import proxy_backend

# What failed, as an UpstreamError's `cause` says (connector/errors.py).
CAUSES = (
    "refused",
    "reset",
    "status",
    "garbage",
    "timeout",
    "first_byte",
    "stale_role",
    "kv_lost",
)
# A 409 from an instance that switches roles at runtime (connector/pool/pd_roles.py): it ran
# nothing, so it is retried like a refused connection and never ejects.
STALE_ROLE = "stale_role"
# Causes that say the instance is broken, not busy: with a spare they eject it at once.
EJECT_AT_ONCE = frozenset({"refused", "garbage", "first_byte"})


@dataclass(frozen=True, slots=True)
class RetrySettings:
    attempts: int = 3  # per request, the first included; 1: never retry
    deadline_s: float = 30.0  # no attempt starts this long after the request arrived
    ratio: float = 0.2  # retries as a share of requests, over time
    min_per_s: float = 2.0  # retries always allowed per second (a quiet proxy still retries)
    burst: float = 10.0  # retry tokens saved at most beyond the recent requests' share
    backoff_s: float = 0.02  # before the second attempt; doubles per attempt
    backoff_max_s: float = 0.5

    def invalid(self) -> str | None:
        """The flag of the first setting out of range, with its range; None when all hold."""
        if not 1 <= self.attempts <= 10:
            return "--retry-attempts must be from 1 to 10"
        if not 0 < self.deadline_s <= 3600:
            return "--retry-deadline must be above 0 and at most 3600 s"
        if not 0 <= self.ratio <= 1:
            return "--retry-budget-ratio must be from 0 to 1"
        if not 0 <= self.min_per_s <= 1000 or not 1 <= self.burst <= 10_000:
            return "--retry-min-per-s must be from 0 to 1000 (and the burst at least 1)"
        if not 0 <= self.backoff_s <= self.backoff_max_s <= 10:
            return "--retry-backoff must be from 0 to 10 s"
        return None


@dataclass(frozen=True, slots=True)
class Retry:
    """How the next attempt goes: which instances are new, and whether the prefill's answer
    (its kv_transfer_params) carries over."""

    new_prefill: bool  # a fresh prefill leg (another prefill when the group has one)
    new_decode: bool
    reuse_params: bool  # the decode gets the first prefill's kv_transfer_params again


def plan(
    leg: str,
    cause: str,
    connector: str,
    mode: str,
    *,
    client_has_bytes: bool,
    client_error: bool,
) -> Retry | None:
    """The decision table above, without the budget: what the next attempt is, or None when
    retrying is unsafe."""
    if client_has_bytes or client_error:
        return None
    cause = "refused" if cause == STALE_ROLE else cause
    if mode == "write":  # both legs run at once: whichever failed, the pair is tried again
        return Retry(True, True, False)
    if leg == "prefill":
        return Retry(True, False, False)
    if cause == "refused" and proxy_backend(connector).decode_retry_alone:
        return Retry(False, True, True)
    return Retry(True, True, False)


def covers_a_hang(settings: RetrySettings, first_byte_s: float, instances: int = 2) -> bool:
    """The budget saves enough tokens to retry every request one hung instance of
    `instances` of its role held when it was found (`first_byte_s` after it went silent),
    at any steady request rate: its share of those seconds' requests, against the saved
    share of the retry window's."""
    return settings.ratio * settings.deadline_s >= first_byte_s / instances


class RetryBudget:
    """Attempts per request, a deadline, and a token bucket shared by all requests; the
    bucket holds at most `burst` plus `ratio` of the last `deadline_s`'s requests."""

    def __init__(self, settings: RetrySettings, now: float) -> None:
        self.settings = settings
        self.tokens = settings.burst
        self._at = now
        self.spent = 0  # retries granted for a token
        self.moved = 0  # retries granted off an instance out of routing, without one
        self.refused: dict[str, int] = {"attempts": 0, "deadline": 0, "budget": 0}
        self._arrivals: deque[list[float]] = deque()  # [second, requests] of the window
        self._recent = 0.0  # requests in the window

    @property
    def cap(self) -> float:
        return self.settings.burst + self.settings.ratio * self._recent

    def request(self, now: float) -> None:
        """A client request arrived: it earns the share of a retry the ratio gives."""
        second = float(int(now))
        if self._arrivals and self._arrivals[-1][0] == second:
            self._arrivals[-1][1] += 1
        else:
            self._arrivals.append([second, 1.0])
        self._recent += 1
        self._forget(now)
        self.tokens = min(self.cap, self.tokens + self.settings.ratio)

    def _forget(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now - self.settings.deadline_s - 1:
            self._recent -= self._arrivals.popleft()[1]

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._at)
        self._at = now
        self._forget(now)
        self.tokens = min(self.cap, self.tokens + elapsed * self.settings.min_per_s)

    def why_not(
        self, attempt: int, arrival: float, now: float, *, moved_off: bool = False
    ) -> str | None:
        """Why attempt number `attempt + 1` may not start (None: it may, and a token is
        spent). `attempt` counts the attempts made so far. `moved_off`: the failed instance
        is out of routing (ejected as hung, refusing, down): the retry moves its request to
        one that serves rather than adding load to a failing one, so it needs no token; its
        number is bounded by what that instance held, and ejection never takes more than
        --eject-max-share of a role, nor the last."""
        s = self.settings
        if attempt >= s.attempts:
            reason = "attempts"
        elif now - arrival >= s.deadline_s:
            reason = "deadline"
        elif moved_off:
            self.moved += 1
            return None
        else:
            self._refill(now)
            if self.tokens < 1:
                reason = "budget"
            else:
                self.tokens -= 1
                self.spent += 1
                return None
        self.refused[reason] += 1
        return reason

    def backoff(self, attempt: int) -> float:
        """The wait before attempt number `attempt + 1` (attempt >= 1)."""
        s = self.settings
        return min(s.backoff_max_s, s.backoff_s * 2 ** max(0, attempt - 1))
