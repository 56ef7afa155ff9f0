"""The stand-in KV transport's wire format: length-prefixed msgpack frames, then raw bytes.

A transfer is a header frame naming what moves, then exactly the announced number of
payload bytes, then an acknowledgement frame from the receiver. Frames are capped, so a
peer speaking garbage gets an error instead of an allocation of its choosing.

The payload is the stand-in's KV: a deterministic function of the prompt's tokens (every
token but the last, the part a prefill hands on), a 32-byte digest of them tiled to the
payload's length. The receiver returns the CRC-32 of what arrived; the decode seeds its
output with it (simulator/kv/transfer.py), so a transfer that delivers other bytes yields
other tokens, and a correct one exactly the colocated answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import zlib
from collections.abc import Sequence
from typing import Any

import msgpack

MAX_FRAME_BYTES = 1 << 20
CHUNK = 1 << 16
DIGEST_BYTES = 32  # CHUNK is a multiple: every chunk starts on the pattern's period


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


def kv_digest(prompt_ids: Sequence[int]) -> bytes:
    """What a prompt's KV is made of on the stand-in's wire: a digest of the prompt's tokens
    but the last (the decode computes the last one itself, connector/legs/rewrite.py)."""
    data = b"".join(t.to_bytes(4, "little") for t in prompt_ids[:-1])
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _tile(digest: bytes) -> bytes:
    return digest * (CHUNK // DIGEST_BYTES + 1)


def payload_crc(digest: bytes, size: int) -> int:
    """The CRC-32 of a correct payload of `size` bytes: what the receiver should see."""
    tile, crc, left = _tile(digest), 0, size
    while left > 0:
        n = min(CHUNK, left)
        crc = zlib.crc32(tile[:n], crc)
        left -= n
    return crc


async def send_payload(
    writer: asyncio.StreamWriter, size: int, digest: bytes, corrupt: bool = False
) -> int:
    """Write `size` payload bytes (the scaled copy of the KV blocks). `corrupt`: the first
    byte goes out flipped (the fault "corrupt_kv", simulator/config/faults.py)."""
    tile, left = _tile(digest), size
    while left > 0:
        n = min(CHUNK, left)
        chunk = tile[:n]
        if corrupt and left == size:
            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
        writer.write(chunk)
        left -= n
        await writer.drain()
    return size


async def read_payload(reader: asyncio.StreamReader, size: int) -> tuple[int, int]:
    """Read `size` payload bytes; returns (size, their CRC-32)."""
    left, crc = size, 0
    while left > 0:
        chunk = await reader.read(min(CHUNK, left))
        if not chunk:
            raise WireError(f"peer closed with {left} of {size} payload bytes unsent")
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    return size, crc
