"""Publish/subscribe for live messages: a bounded queue per subscriber, never a blocked
producer. Messages are serialized once, on publish, and shared by every subscriber.

A full queue drops its oldest droppable message (a chart frame: the next one supersedes it),
and only when it holds nothing droppable (a burst of events), its oldest message.

Subscriptions belong to one event loop (`bind`); `publish_threadsafe` is for producers on
other threads (the store, written from FastAPI's thread pool).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any


class Subscription:
    def __init__(self, hub: Hub, topics: frozenset[str], size: int) -> None:
        self.hub, self.topics, self.size = hub, topics, size
        self._queue: deque[tuple[bool, str]] = deque()
        self._ready = asyncio.Event()
        self.dropped = 0

    def offer(self, text: str, droppable: bool) -> None:
        if len(self._queue) >= self.size:
            self._drop_one()
        self._queue.append((droppable, text))
        self._ready.set()

    def _drop_one(self) -> None:
        self.dropped += 1
        for i, (droppable, _) in enumerate(self._queue):
            if droppable:
                del self._queue[i]
                return
        self._queue.popleft()

    async def get(self) -> str:
        while not self._queue:
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()[1]

    def pending(self) -> int:
        return len(self._queue)

    def close(self) -> None:
        self.hub.unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Hub:
    def __init__(self, queue_size: int = 16) -> None:
        self.queue_size = queue_size
        self._topics: dict[str, set[Subscription]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the subscribers wait on: publishes from other threads are handed to it."""
        self._loop = loop

    def subscribe(self, topics: Iterable[str]) -> Subscription:
        sub = Subscription(self, frozenset(topics), self.queue_size)
        for topic in sub.topics:
            self._topics.setdefault(topic, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        for topic in sub.topics:
            subs = self._topics.get(topic)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._topics[topic]

    def subscribers(self, topic: str | None = None) -> int:
        if topic is not None:
            return len(self._topics.get(topic, ()))
        return len({s for subs in self._topics.values() for s in subs})

    def publish(self, topic: str, message: dict[str, Any] | str, droppable: bool = True) -> int:
        """Queue `message` for every subscriber of `topic`; returns how many got it."""
        subs = self._topics.get(topic)
        if not subs:
            return 0
        text = message if isinstance(message, str) else encode(message)
        for sub in list(subs):
            sub.offer(text, droppable)
        return len(subs)

    def publish_threadsafe(
        self, topic: str, message: dict[str, Any] | str, droppable: bool = True
    ) -> None:
        """`publish` from any thread: serialized here, queued on the bound loop's thread."""
        loop = self._loop
        if loop is None or _running_loop() is loop:
            self.publish(topic, message, droppable)
            return
        text = message if isinstance(message, str) else encode(message)
        if not loop.is_closed():
            loop.call_soon_threadsafe(self.publish, topic, text, droppable)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def encode(message: Mapping[str, Any]) -> str:
    """JSON text; non-finite numbers (which JSON cannot carry) become null."""
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        return json.dumps(_finite(message), separators=(",", ":"), default=str)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
