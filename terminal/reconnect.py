"""Riding out a server restart, as `pdctl top` does: a follower (events, logs, rollout
status) that loses `pdctl serve` says so on stderr and asks again after a capped, jittered
backoff, until it answers or the follower's --timeout ends; any other failure still ends it."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import typer

from terminal import exits
from terminal.client import ApiError

T = TypeVar("T")
BACKOFF_CAP_S = 30.0


def backoff(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """The dashboard's delay: 0.5 s, 1 s, 2 s ... capped at 30 s, the upper half jittered."""
    cap = min(BACKOFF_CAP_S, 0.5 * 2**attempt)
    return cap / 2 + rng() * cap / 2


@dataclass
class Reconnect:
    """One follower's retries: `lost` waits out a drop, `served` starts the backoff afresh."""

    verb: str
    deadline: float | None = None  # time.monotonic() at which the follower stops anyway
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rng: Callable[[], float] = random.random
    attempt: int = 0

    def lost(self, exc: ApiError) -> None:
        """Wait before the next try when the server went away; re-raise anything else."""
        if exc.code != exits.UNREACHABLE:
            raise exc
        delay = backoff(self.attempt, self.rng)
        if self.deadline is not None:
            delay = min(delay, max(0.0, self.deadline - self.clock()))
        self.attempt += 1
        typer.echo(f"pdctl {self.verb}: {exc.message}; retrying in {delay:.1f} s", err=True)
        self.sleep(delay)

    def served(self) -> None:
        if self.attempt:
            typer.echo(f"pdctl {self.verb}: reconnected", err=True)
        self.attempt = 0

    def asking(self, ask: Callable[[], T]) -> Callable[[], T | None]:
        """`ask`, answering None (after the backoff) while the server cannot be reached."""

        def retried() -> T | None:
            try:
                answer = ask()
            except ApiError as exc:
                self.lost(exc)
                return None
            self.served()
            return answer

        return retried
