"""The hub topics the observer publishes on, and the window a reader gets unless it asks:
the web's websockets subscribe by these names."""

from __future__ import annotations

from observe.frames import Window

DEFAULT_WINDOW: Window = "1m"


def frame_topic(name: str, window: str) -> str:
    return f"frame:{name}:{window}"


def event_topic(name: str) -> str:
    return f"event:{name}"
