"""`pdctl top`'s feed without a server: what each close code means, the backoff after a drop
or a refused connection (and its reset once frames flow), and the socket's address."""

from __future__ import annotations

import itertools
import json

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close

from terminal import exits
from terminal.config import Target
from terminal.top.feed import Feed, FeedClosed, ws_url


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class Socket:
    """A connected websocket that hands out `script`: messages, then a close (or a wait)."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.closed = False

    def recv(self, timeout: float | None = None) -> str:
        if not self.script:
            raise TimeoutError
        item = self.script.pop(0)
        if isinstance(item, Close):
            raise ConnectionClosed(item, None)
        return json.dumps(item)

    def close(self) -> None:
        self.closed = True


class Opener:
    """The websocket seam: each call takes the next of `outcomes` (a Socket, or raises)."""

    def __init__(self, *outcomes) -> None:
        self.outcomes, self.calls = list(outcomes), []

    def __call__(self, url: str, **kw):
        self.calls.append((url, kw))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def feed(opener: Opener, token: str | None = None) -> tuple[Feed, Clock]:
    clock = Clock()
    target = Target("http://127.0.0.1:8000", token)
    return Feed(target, "mori", "10s", opener=opener, clock=clock, sleep=clock.sleep), clock


FRAME = {"type": "frame", "deployment": "mori", "ts": 1.0}


def test_messages_arrive_and_a_frame_makes_it_live() -> None:
    history = {"type": "history", "points": []}
    opener = Opener(Socket([history, FRAME, {"type": "event", "id": 1}]))
    f, _ = feed(opener, token="s3cret")
    assert f.poll(0.1) == [] and f.status == "connected, waiting for a frame"
    assert [m["type"] for m in f.poll(0.1)] == ["history", "frame", "event"]
    assert f.status == "live" and f.opens == 1
    url, kw = opener.calls[0]
    assert url == "ws://127.0.0.1:8000/ws/deployments/mori?window=10s"
    assert kw["additional_headers"] == {"Authorization": "Bearer s3cret"}
    assert kw["proxy"] is None and kw["open_timeout"] <= 10


@pytest.mark.parametrize(
    ("code", "reason", "exit_code", "said"),
    [
        (
            4401,
            "a valid viewer or operator token is required",
            exits.NOT_ALLOWED,
            "(set PDCTL_TOKEN)",
        ),
        (4404, "no deployment named 'mori'", exits.FAILED, "no deployment named 'mori'"),
        (4400, "window is one of 10s, 1m, 5m", exits.USAGE, "window is one of"),
        (4429, "too many unknown tokens", exits.NOT_ALLOWED, "refused by http://127.0.0.1:8000"),
    ],
)
def test_a_close_the_server_means_ends_the_feed_in_one_line(code, reason, exit_code, said) -> None:
    f, _ = feed(Opener(Socket([Close(code, reason)])))
    f.poll(0.1)
    with pytest.raises(FeedClosed) as closed:
        f.poll(0.1)
    assert closed.value.code == exit_code and said in closed.value.message
    assert "\n" not in closed.value.message


@pytest.mark.parametrize("code", [1013, 1012, 1001, 1011, 1000])
def test_any_other_close_is_retried_after_a_backoff(code) -> None:
    opener = Opener(Socket([FRAME, Close(code, "going away")]), Socket([FRAME]))
    f, clock = feed(opener)
    f.poll(0.1), f.poll(0.1)
    assert f.poll(0.1) == [] and f.status.startswith("retrying in ")
    assert f.last_error == f"disconnected ({code}: going away)"
    assert len(opener.calls) == 1  # not at once: it waits its backoff, a tick at a time
    for _ in range(100):
        if len(opener.calls) == 2:
            break
        f.poll(0.1)
    assert len(opener.calls) == 2 and clock.now - 100.0 <= 1.0  # the first retry: <= 0.5 s
    assert f.poll(0.1) == [FRAME] and f.status == "live"


def test_an_unreachable_server_backs_off_longer_each_time_then_afresh_once_it_serves() -> None:
    refused = [ConnectionRefusedError(111, "Connection refused") for _ in range(4)]
    opener = Opener(*refused, Socket([FRAME]))
    f, clock = feed(opener)
    starts = []
    for _ in range(2000):
        if len(opener.calls) > len(starts):
            starts.append(clock.now)
        if f.opens:
            break
        f.poll(0.1)
    assert f.opens == 1 and len(starts) == 5
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps == sorted(gaps) and gaps[-1] >= 2.0  # 0.5, 1, 2, 4 s caps, jittered
    assert f.poll(0.1) == [FRAME] and f._attempt == 0


def test_a_refused_connection_says_so_while_it_waits() -> None:
    f, _ = feed(Opener(ConnectionRefusedError(111, "Connection refused")))
    f.poll(0.1)
    assert f.status.startswith("retrying in ") and not f.ever_connected
    assert f.last_error == "cannot reach http://127.0.0.1:8000 (Connection refused)"


def test_the_address_follows_the_server() -> None:
    assert ws_url("https://pd.example.com/base", "a b", "5m") == (
        "wss://pd.example.com/base/ws/deployments/a%20b?window=5m"
    )
