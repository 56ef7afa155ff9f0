"""A cap on request bodies (pure ASGI): 413 by Content-Length, or once a stream passes it.

A body without Content-Length (chunked) is read here, up to the cap, before the app sees it:
an error raised mid-read inside FastAPI would become its generic 400.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.errors import TooLarge, render


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = render(
            Request(scope), TooLarge(f"request body larger than {self.max_bytes} bytes")
        )
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > self.max_bytes:
                await too_large(scope, receive, send)
                return
            await self.app(scope, receive, send)  # the server holds the client to its length
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b""):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size, more = 0, True
        while more:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            more = message["type"] == "http.request" and message.get("more_body", False)
            if size > self.max_bytes:
                await too_large(scope, receive, send)
                return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)
