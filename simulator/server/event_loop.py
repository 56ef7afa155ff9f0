"""The event loop the stand-in's servers run on: uvloop where it is installed."""

from __future__ import annotations

import asyncio


def use_uvloop() -> None:
    """uvloop halves the per-token CPU of the servers; plain asyncio works too."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
