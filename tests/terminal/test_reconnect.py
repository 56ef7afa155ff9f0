"""A follower's retries when the server goes away: capped, jittered backoff bounded by the
follower's deadline, said on stderr, started afresh once it answers; any other failure ends
the follow."""

from __future__ import annotations

import pytest

from terminal import exits
from terminal.client import ApiError
from terminal.reconnect import Reconnect, backoff

GONE = ApiError("--server http://127.0.0.1:9: cannot reach it (refused)", exits.UNREACHABLE)


class Clock:
    def __init__(self) -> None:
        self.now, self.slept = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def test_backoff_is_capped_and_jittered_in_its_upper_half() -> None:
    assert backoff(0, lambda: 0.0) == 0.25 and backoff(0, lambda: 1.0) == 0.5
    assert backoff(3, lambda: 1.0) == 4.0
    assert backoff(40, lambda: 1.0) == 30.0 and backoff(40, lambda: 0.0) == 15.0


def test_a_lost_server_is_asked_again_after_a_growing_wait(capsys) -> None:
    clock = Clock()
    answers: list[object] = [GONE, GONE, GONE, "frame"]

    def ask() -> object:
        answer = answers.pop(0)
        if isinstance(answer, ApiError):
            raise answer
        return answer

    retry = Reconnect("events", None, clock.sleep, clock, lambda: 1.0)
    asking = retry.asking(ask)
    assert [asking() for _ in range(4)] == [None, None, None, "frame"]
    assert clock.slept == [0.5, 1.0, 2.0]
    assert retry.attempt == 0  # it answered: the next drop starts afresh
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "pdctl events: --server http://127.0.0.1:9: cannot reach it (refused); retrying in 0.5 s"
    )
    assert err[-1] == "pdctl events: reconnected"


def test_the_wait_never_outlasts_the_deadline() -> None:
    clock = Clock()
    retry = Reconnect("logs", 0.3, clock.sleep, clock, lambda: 1.0)
    retry.lost(GONE)
    assert clock.slept == [0.3]
    retry.lost(GONE)
    assert clock.slept == [0.3, 0.0]


@pytest.mark.parametrize("code", [exits.FAILED, exits.NOT_ALLOWED, exits.USAGE])
def test_anything_but_a_lost_server_ends_the_follow(code) -> None:
    clock = Clock()
    refused = ApiError("404: no deployment named 'x'", code)
    with pytest.raises(ApiError) as raised:
        Reconnect("events", None, clock.sleep, clock).lost(refused)
    assert raised.value is refused and clock.slept == []
