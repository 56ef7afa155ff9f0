"""A small bounded load through a deployment's proxy that keeps a ledger of every request it
sent (when it left, when it ended, how), and the windows in which a request may fail because
the test itself broke what served it: the rest must all have succeeded ("no request lost").

Each request runs in a worker of its own, so one held by the proxy (a hold rollout) does not
delay the next; the rate stays what it was asked to be while fewer than `workers` are open.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from harness.processes import http_post

PROMPT = {"model": "tiny", "prompt": "one two three", "max_tokens": 4, "ignore_eos": True}


@dataclass(frozen=True, slots=True)
class Sent:
    """One request: monotonic seconds it left and ended, and how it ended."""

    number: int
    started: float
    ended: float
    ok: bool
    error: str | None = None

    def overlaps(self, begins: float, ends: float) -> bool:
        return self.started <= ends and self.ended >= begins


@dataclass(frozen=True, slots=True)
class Excuse:
    """A window in which a request may fail, and why: a process the test killed itself, or a
    rollout documented to refuse requests (recreate). With `only`, just the failures whose
    error says it, or one of them (e.g. the proxy's "no available decode instance")."""

    begins: float
    ends: float
    why: str
    only: str | tuple[str, ...] | None = None

    def covers(self, sent: Sent) -> bool:
        said_any = (self.only,) if isinstance(self.only, str) else self.only
        said = said_any is None or any(s in (sent.error or "") for s in said_any)
        return said and sent.overlaps(self.begins, self.ends)


def unexplained(sent: list[Sent], excuses: list[Excuse]) -> list[Sent]:
    """The failed requests that no excuse covers: each one a lost request."""
    return [s for s in sent if not s.ok and not any(e.covers(s) for e in excuses)]


class RequestLedger:
    """Short completions at `rate` per second through `url` (a proxy), each recorded."""

    def __init__(
        self, url: str, rate: float = 3.0, timeout_s: float = 90.0, workers: int = 32
    ) -> None:
        self.url, self.rate, self.timeout_s = url.rstrip("/"), rate, timeout_s
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="ledger")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sent: list[Sent] = []
        self._open: dict[int, float] = {}  # number -> started, for requests not yet ended
        self._count = 0
        self._pacer = threading.Thread(target=self._pace, name="ledger-pacer", daemon=True)

    def start(self) -> RequestLedger:
        self._pacer.start()
        return self

    def stop(self) -> list[Sent]:
        """Stop sending, wait for every request still open (each bounded by its timeout)."""
        self._stop.set()
        self._pacer.join()
        self._pool.shutdown(wait=True)
        return self.sent()

    def sent(self) -> list[Sent]:
        """The requests that ended, in the order they ended."""
        with self._lock:
            return list(self._sent)

    def open_since(self) -> list[float]:
        """When each request still open left."""
        with self._lock:
            return sorted(self._open.values())

    def _pace(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                self._count += 1
                number, started = self._count, time.monotonic()
                self._open[number] = started
            self._pool.submit(self._one, number, started)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _one(self, number: int, started: float) -> None:
        try:
            status, body = http_post(self.url + "/v1/completions", PROMPT, self.timeout_s)
            ok = status == 200 and bool(body.get("choices"))
            error = None if ok else f"{status}: {str(body)[:200]}"
        except Exception as exc:  # connection refused, reset, timed out: a failure recorded
            ok, error = False, f"{type(exc).__name__}: {exc}"[:200]
        with self._lock:
            self._open.pop(number, None)
            self._sent.append(Sent(number, started, time.monotonic(), ok, error))
