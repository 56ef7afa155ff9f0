"""The one bounded wait of the verbs that watch something change (start, stop, restart,
switch, logs --follow): ask, look, sleep, until the look says done or the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
INTERVAL_S = 0.3


class TimedOut(RuntimeError):
    """The wait ended before it was done; carries the last answer."""

    def __init__(self, last: Any) -> None:  # what the poll's ask answered last
        super().__init__("timed out")
        self.last = last


def poll(
    ask: Callable[[], T],
    done: Callable[[T], bool],
    timeout_s: float | None,
    interval_s: float = INTERVAL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """The first answer `done` accepts; TimedOut after `timeout_s` (None: no bound)."""
    deadline = None if timeout_s is None else clock() + timeout_s
    while True:
        answer = ask()
        if done(answer):
            return answer
        if deadline is not None and clock() >= deadline:
            raise TimedOut(answer)
        left = interval_s if deadline is None else min(interval_s, max(0.0, deadline - clock()))
        sleep(left)
