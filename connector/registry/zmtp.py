"""The registry's receiving end of ZMTP 3.0 (rfc.zeromq.org/spec/23, NULL security), on an
asyncio TCP server, so that what a sender may make the proxy hold is bounded per message:
at most `max_frames` frames of at most `max_frame_bytes` each. libzmq bounds only each frame
(ZMQ_MAXMSGSIZE) and holds every part of a multipart message until its last arrives: one
12,000-frame message, each frame under the limit, grew the proxy to 250 MB (issue 39). Here a
message over either bound is refused and its connection closed as soon as the bound is
passed, before more is read.

Peers are ZMQ DEALER (or REQ) sockets, as MoRIIO instances use: the greeting and READY
exchange of ZMTP 3.0, then messages as frames. Version 3.0 is announced, so no peer sends
heartbeat PINGs; any command after READY is skipped. Each message is handed on as its frames
with the sender's IP; the caller takes the last frame (a REQ's empty delimiter comes first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Callable

log = logging.getLogger("pdctl.registry")

SIGNATURE_HEAD, SIGNATURE_TAIL = 0xFF, 0x7F
GREETING = (
    bytes([SIGNATURE_HEAD]) + bytes(8) + bytes([SIGNATURE_TAIL])  # signature
    + bytes([3, 0])  # version 3.0
    + b"NULL".ljust(20, b"\0")  # mechanism
    + b"\0"  # as-server: NULL has no roles
    + bytes(31)  # filler
)  # fmt: skip
MORE, LONG, COMMAND = 0x01, 0x02, 0x04
HANDSHAKE_S = 10.0  # a peer must greet and say READY within this
MAX_PEERS = 256  # connections at once; more are closed on accept


class ProtocolRefused(Exception):
    """What a peer sent breaks ZMTP ("malformed") or a bound ("too_large"); its connection
    is closed."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


def command(name: bytes, properties: dict[bytes, bytes]) -> bytes:
    """One short command frame (READY with its metadata)."""
    body = bytes([len(name)]) + name
    for key, value in properties.items():
        body += bytes([len(key)]) + key + struct.pack(">I", len(value)) + value
    return frame(body, COMMAND)


def frame(body: bytes, flags: int = 0) -> bytes:
    if len(body) > 255:
        return bytes([flags | LONG]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


READY = command(b"READY", {b"Socket-Type": b"ROUTER"})


class ZmtpReceiver:
    """Accepts ZMTP peers on a bound socket and calls `on_message(frames, peer_ip)` for each
    whole message within the bounds, `on_refused(why, peer_ip)` for a peer cut off."""

    def __init__(
        self,
        on_message: Callable[[list[bytes], str | None], None],
        on_refused: Callable[[str, str, str | None], None],  # (reason, why, peer)
        max_frames: int,
        max_frame_bytes: int,
    ) -> None:
        self.on_message, self.on_refused = on_message, on_refused
        self.max_frames, self.max_frame_bytes = max_frames, max_frame_bytes
        self.peers = 0
        self._server: asyncio.Server | None = None

    async def serve(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_server(self._peer, sock=sock)
        async with self._server:
            await self._server.serve_forever()

    async def _peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        ip = peername[0] if isinstance(peername, tuple) else None
        if self.peers >= MAX_PEERS:
            writer.close()
            self.on_refused("too_many_peers", f"more than {MAX_PEERS} connections", ip)
            return
        self.peers += 1
        try:
            await asyncio.wait_for(self._handshake(reader, writer), HANDSHAKE_S)
            while True:
                frames = await self._message(reader)
                self.on_message(frames, ip)
                await asyncio.sleep(0)  # a flood must not starve the proxy's requests
        except ProtocolRefused as exc:
            self.on_refused(exc.reason, str(exc), ip)
        except TimeoutError:
            self.on_refused("malformed", f"no ZMTP handshake within {HANDSHAKE_S:g} s", ip)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the peer went away
        finally:
            self.peers -= 1
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(GREETING)
        greeting = await reader.readexactly(64)
        if greeting[0] != SIGNATURE_HEAD or greeting[9] != SIGNATURE_TAIL:
            raise ProtocolRefused("not a ZMTP greeting")
        if greeting[10] < 3:
            raise ProtocolRefused(f"ZMTP {greeting[10]}.x: 3.0 or later is spoken here")
        if greeting[12:32].rstrip(b"\0") != b"NULL":
            raise ProtocolRefused("only the NULL mechanism is spoken here")
        writer.write(READY)
        await writer.drain()
        flags, body = await self._frame(reader)
        if not flags & COMMAND or body[1 : 1 + body[0]] != b"READY":
            raise ProtocolRefused("the peer did not say READY")

    async def _message(self, reader: asyncio.StreamReader) -> list[bytes]:
        frames: list[bytes] = []
        while True:
            flags, body = await self._frame(reader)
            if flags & COMMAND:
                continue  # PING and the like: nothing to do for a 3.0 peer
            frames.append(body)
            if not flags & MORE:
                return frames
            if len(frames) >= self.max_frames:
                raise ProtocolRefused(
                    f"a message of more than {self.max_frames} frames; a registration has one",
                    "too_large",
                )

    async def _frame(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        flags = (await reader.readexactly(1))[0]
        if flags & LONG:
            (size,) = struct.unpack(">Q", await reader.readexactly(8))
        else:
            size = (await reader.readexactly(1))[0]
        if size > self.max_frame_bytes:
            raise ProtocolRefused(
                f"a frame of {size} bytes, more than {self.max_frame_bytes}", "too_large"
            )
        return flags, await reader.readexactly(size)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
