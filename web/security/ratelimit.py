"""Failed authentications in a sliding window, per client address and over all addresses.
Pure: `now` is passed in.

Once an address has failed `limit` times within `window` seconds, or all addresses together
`global_limit` times, further wrong secrets are refused (429) until the oldest failure leaves
the window: rotating the source address (any of 127.0.0.0/8, a /64 of IPv6) gains nothing.
A right token is never refused by the lockout (web/security/auth.py): refusing it let ten
wrong tokens from a shared address lock every operator on it out.
Memory is bounded: at most `limit` times per address, at most `max_clients` addresses (the
one that failed longest ago is forgotten first), at most `global_limit` times overall.
"""

from __future__ import annotations

from collections import OrderedDict, deque

EVERYONE = "all addresses"


class FailureWindow:
    def __init__(
        self,
        limit: int,
        window: float = 60.0,
        max_clients: int = 10_000,
        global_limit: int | None = None,
    ) -> None:
        global_limit = 5 * limit if global_limit is None else global_limit
        if limit < 1 or window <= 0 or max_clients < 1 or global_limit < 1:
            raise ValueError("limits and max_clients must be at least 1, window positive")
        self.limit, self.window, self.max_clients = limit, window, max_clients
        self.global_limit = global_limit
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._everyone: deque[float] = deque(maxlen=global_limit)

    def retry_after(self, client: str, now: float) -> float | None:
        """Seconds until `client` may try again; None when it may try now."""
        return self.refusal(client, now)[0]

    def refusal(self, client: str, now: float) -> tuple[float | None, str]:
        """(seconds until `client` may try again or None, whose failures refuse it: the
        address's own or EVERYONE's)."""
        times = self._recent(client, now)
        _expire(self._everyone, now - self.window)
        if times is not None and len(times) >= self.limit:
            return times[0] + self.window - now, client
        if len(self._everyone) >= self.global_limit:
            return self._everyone[0] + self.window - now, EVERYONE
        return None, client

    def failed(self, client: str, now: float) -> None:
        times = self._recent(client, now)
        if times is None:
            times = self._failures[client] = deque(maxlen=self.limit)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)
        times.append(now)
        self._failures.move_to_end(client)
        self._everyone.append(now)

    def clients(self) -> int:
        """Addresses remembered (some of them may have nothing left in the window)."""
        return len(self._failures)

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        _expire(times, now - self.window)
        if not times:
            del self._failures[client]
            return None
        return times


def _expire(times: deque[float], before: float) -> None:
    while times and times[0] <= before:
        times.popleft()
