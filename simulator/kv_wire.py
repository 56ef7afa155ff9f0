"""The stand-in KV transport's wire format: length-prefixed msgpack frames, then raw bytes.

A transfer is a header frame naming what moves, then exactly the announced number of
payload bytes, then an acknowledgement frame from the receiver. Frames are capped, so a
peer speaking garbage gets an error instead of an allocation of its choosing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

MAX_FRAME_BYTES = 1 << 20
CHUNK = 1 << 16
_ZEROS = bytes(CHUNK)


class WireError(Exception):
    """The peer closed early, sent an oversized frame, or spoke something else."""


async def send_frame(writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
    data = msgpack.packb(frame, use_bin_type=True)
    writer.write(len(data).to_bytes(4, "big") + data)
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    try:
        size = int.from_bytes(await reader.readexactly(4), "big")
        if size > MAX_FRAME_BYTES:
            raise WireError(f"frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
        frame = msgpack.unpackb(await reader.readexactly(size), raw=False)
    except asyncio.IncompleteReadError:
        raise WireError("peer closed the connection mid-frame") from None
    except (msgpack.UnpackException, ValueError) as exc:
        raise WireError(f"malformed frame: {exc}") from None
    if not isinstance(frame, dict):
        raise WireError("frame is not a map")
    return frame


async def send_payload(writer: asyncio.StreamWriter, size: int) -> int:
    """Write `size` payload bytes (the scaled copy of the KV blocks)."""
    left = size
    while left > 0:
        n = min(CHUNK, left)
        writer.write(_ZEROS[:n])
        left -= n
        await writer.drain()
    return size


async def read_payload(reader: asyncio.StreamReader, size: int) -> int:
    left = size
    while left > 0:
        chunk = await reader.read(min(CHUNK, left))
        if not chunk:
            raise WireError(f"peer closed with {left} of {size} payload bytes unsent")
        left -= len(chunk)
    return size
