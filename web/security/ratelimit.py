"""Failed authentications per client address in a sliding window. Pure: `now` is passed in.

Once an address has failed `limit` times within `window` seconds, every attempt from it is
refused, a right token too, until its oldest failure leaves the window: answering a right
token while refusing wrong ones would tell a guesser when it guessed right. A success does
not clear the count either, or a viewer token could reset the guessing of an operator one.
Memory is bounded: at most `limit` times per address, at most `max_clients` addresses (the
one that failed longest ago is forgotten first).
"""

from __future__ import annotations

from collections import OrderedDict, deque


class FailureWindow:
    def __init__(self, limit: int, window: float = 60.0, max_clients: int = 10_000) -> None:
        if limit < 1 or window <= 0 or max_clients < 1:
            raise ValueError("limit and max_clients must be at least 1, window positive")
        self.limit, self.window, self.max_clients = limit, window, max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str, now: float) -> float | None:
        """Seconds until `client` may try again; None when it may try now."""
        times = self._recent(client, now)
        if times is None or len(times) < self.limit:
            return None
        return times[0] + self.window - now

    def failed(self, client: str, now: float) -> None:
        times = self._recent(client, now)
        if times is None:
            times = self._failures[client] = deque(maxlen=self.limit)
            while len(self._failures) > self.max_clients:
                self._failures.popitem(last=False)
        times.append(now)
        self._failures.move_to_end(client)

    def clients(self) -> int:
        """Addresses remembered (some of them may have nothing left in the window)."""
        return len(self._failures)

    def _recent(self, client: str, now: float) -> deque[float] | None:
        times = self._failures.get(client)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times
