"""MoRIIO-style registration: tell the proxy's ZMQ registry who we are, every 3 seconds.

The message is the newer shape of PROTOCOL.md section 2. Instances keep re-registering
until the proxy answers, so start order does not matter; a heartbeat that stops tells the
proxy the instance is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import msgpack
import zmq
import zmq.asyncio

from simulator.config.engine import EngineSettings, KVTransferSettings

log = logging.getLogger("pdctl.sim.registration")
HEARTBEAT_S = 3.0


def registration_message(settings: EngineSettings, kv: KVTransferSettings, host: str) -> dict:
    """What vLLM's MoRIIO worker sends: `host` is its advertised address (host_ip, else the
    machine's), for both the HTTP address the proxy routes to and the ZMQ side channel."""
    return {
        "type": "P" if kv.role == "kv_producer" else "D",
        "http_address": f"{host}:{settings.port}",
        "zmq_address": f"host:{host},handshake:{kv.kv_port},notify:{kv.notify_port or 0}",
        "dp_size": 1,
        "tp_size": settings.tensor_parallel_size,
        "transfer_mode": kv.transfer_mode,
    }


async def heartbeat(
    message: dict,
    proxy_ip: str,
    ping_port: int,
    interval_s: float = HEARTBEAT_S,
    adjust: Callable[[dict], dict | None] | None = None,
) -> None:
    """Send `message` to the registry forever (until cancelled). `adjust` (fault injection)
    may change a beat's message, or skip the beat by returning None."""
    ctx = zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 4)  # a proxy that is down must not pile up heartbeats
    sock.connect(f"tcp://{proxy_ip}:{ping_port}")
    payload = msgpack.packb(message)
    try:
        while True:
            beat = message if adjust is None else adjust(message)
            if beat is not None:
                with contextlib.suppress(zmq.Again):
                    await sock.send(
                        payload if beat is message else msgpack.packb(beat), flags=zmq.NOBLOCK
                    )
            await asyncio.sleep(interval_s)
    finally:
        sock.close(linger=0)
