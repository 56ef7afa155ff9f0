"""Each stored event, as written, to the live sockets of its deployment: the store's
`publish` (state/store/), so events are pushed rather than polled from SQLite."""

from __future__ import annotations

from collections.abc import Callable

from observe.scrape.topics import event_topic
from state.hub import Hub
from state.models import Event
from web.schemas import EventOut


def event_publisher(hub: Hub) -> Callable[[Event], None]:
    def publish(event: Event) -> None:
        if event.deployment:
            message = {"type": "event", **EventOut.of(event).model_dump(mode="json")}
            hub.publish_threadsafe(event_topic(event.deployment), message, droppable=False)

    return publish
