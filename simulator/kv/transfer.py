"""The stand-in's KV hand-off between a prefill and a decode, over real TCP sockets.

Read mode (NIXL, MoRIIO READ): once the decode has blocks for a request, it connects to the
prefill's KV port, names the held request, receives the payload, acknowledges, and the
prefill frees the blocks. Write mode (MoRIIO WRITE): the decode announces its block ids on
the prefill's notify port; when the prefill has computed the prompt it pushes the payload
to the decode's KV port, then frees its blocks.

The model sets the clock: the KV is ready at (blocks allocated + the hand-off model's
transfer time, simulator/model/handoff.py, over the path this hardware and connector take),
or in write mode at the later of that and (prefill done + one layer's share), the push
overlapping with prefill compute. The wire carries modelled bytes x wire scale; if the wire
is slower than the model, the later time wins and an overrun is counted.

The bytes are the prompt's (kv_wire.kv_digest); the CRC of what arrived seeds the decode's
output (EngineRequest.kv_seed_delta): wrong bytes give a wrong answer with a 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from domain import profiles
from simulator.config.engine import EngineSettings, KVTransferSettings
from simulator.config.faults import Faults, kv_fault
from simulator.engine.request import EngineRequest
from simulator.engine.wall_clock import EngineLoop
from simulator.kv.peers import PeerAgents, stale_reply
from simulator.kv.wire import (
    WireError,
    kv_digest,
    payload_crc,
    read_frame,
    read_payload,
    send_frame,
    send_payload,
)
from simulator.metrics.export import EngineMetrics

log = logging.getLogger("pdctl.sim.kv")


@dataclass(slots=True)
class RemoteKV:
    """Where a decode leg's KV comes from (parsed from kv_transfer_params / X-Request-Id)."""

    key: str  # NIXL remote_request_id, or MoRIIO transfer_id
    host: str
    port: int  # read: the prefill's KV port; write: its notify port
    engine_id: str | None
    block_ids: list[int]
    write: bool


@dataclass(slots=True)
class _Held:
    request_id: str
    modelled_bytes: float
    blocks: int
    digest: bytes  # what its KV bytes are (kv_wire.kv_digest of the prompt)


class KVTransferAgent:
    def __init__(
        self,
        settings: EngineSettings,
        kv: KVTransferSettings,
        engine: EngineLoop,
        metrics: EngineMetrics,
        faults: Faults | None = None,
    ) -> None:
        self.settings, self.kv, self.engine, self.metrics = settings, kv, engine, metrics
        self.faults = faults  # only with --enable-fault-injection (simulator/config/faults.py)
        self.model = profiles.model(settings.model_profile)
        # Every map here is keyed by a request or transfer and loses its entry on every
        # terminal path of it (answered, aborted, failed, expired): a stand-in serves weeks.
        self._held: dict[str, _Held] = {}  # prefill side: key -> held request
        # Write mode, prefill side: transfer_id -> (decode host, port, model time it came).
        self._targets: dict[str, tuple[str, int, float]] = {}
        self._pushes: dict[str, asyncio.Future] = {}  # decode side: transfer_id -> done
        self._remote: dict[str, RemoteKV] = {}  # decode side: request id -> source
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task] = set()
        self.failures: dict[str, str] = {}  # decode side: request id -> why its KV never came
        self.peers = PeerAgents(settings.kv_stale_peer)  # decode side: simulator/kv/peers.py

    async def start(self) -> None:
        ports = {self.kv.kv_port}
        if self.kv.notify_port is not None:
            ports.add(self.kv.notify_port)
        for port in sorted(ports):
            # On the configured KV host only (vLLM's NIXL binds there too; its MoRIIO binds
            # every address), so that engines on several addresses of one machine, the
            # tests' "nodes", can each take the same port.
            server = await asyncio.start_server(self._serve, self.settings.kv_bind_host, port)
            self._servers.append(server)

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def _spawn(self, coro) -> None:  # a task kept until it ends
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def advertised_host(self) -> str:
        return self.settings.kv_advertised_host

    def wire_bytes(self, modelled: float) -> int:
        return max(1, int(modelled * self.settings.kv_wire_scale))

    def _corrupting(self) -> bool:  # the fault corrupt_kv: every payload sent is wrong
        return kv_fault(self.faults) == "corrupt_kv"

    def prefill_done(self, key: str, req: EngineRequest) -> None:
        """A prefill leg finished and holds its KV; a decode may now take it."""
        modelled = (req.prompt_len - 1) * self.model.kv_bytes_per_token
        self._held[key] = _Held(
            req.request_id, modelled, len(req.block_ids), kv_digest(req.prompt_token_ids)
        )
        target = self._targets.pop(key, None)
        if target is not None:
            self._spawn(self._push(key, target[:2]))

    def release(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            self.engine.scheduler.release_kv(held.request_id)

    def kv_expired(self, req: EngineRequest) -> None:
        """The scheduler freed a held prefill's KV at its deadline: no decode will take it."""
        for key in [k for k, h in self._held.items() if h.request_id == req.request_id]:
            del self._held[key]

    async def _push(self, key: str, target: tuple[str, int]) -> None:
        held = self._held.get(key)
        if held is None:
            return
        try:
            reader, writer = await asyncio.open_connection(*target)
        except OSError as exc:
            log.warning("push of %s to %s:%s failed: %s", key, *target, exc)
            self.metrics.failed_notifications += 1
            return
        try:
            size = self.wire_bytes(held.modelled_bytes)
            await send_frame(writer, {"op": "push", "key": key, "bytes": size})
            self.metrics.wire_bytes["sent"] += await send_payload(
                writer, size, held.digest, self._corrupting()
            )
            ack = await read_frame(reader)
            if ack.get("ok"):
                self.release(key)
        except (WireError, OSError) as exc:
            log.warning("push of %s failed: %s", key, exc)
        finally:
            writer.close()

    def expect(self, request_id: str, remote: RemoteKV) -> None:
        """Remember where a decode leg's KV comes from, before the engine gives it blocks."""
        self._remote[request_id] = remote
        if remote.write:
            self._pushes[remote.key] = asyncio.get_running_loop().create_future()

    def forget(self, request_id: str, key: str | None = None) -> None:
        """The server answered `request_id` (`key`: its hand-off key): drop what only it
        needed. A prefill leg's held KV stays, for its decode, until released or expired."""
        self.failures.pop(request_id, None)
        remote = self._remote.pop(request_id, None)
        if remote is not None:
            fut = self._pushes.pop(remote.key, None)
            if fut is not None and not fut.done():
                fut.cancel()
        if key is not None and key not in self._held:
            self._targets.pop(key, None)  # a decode announced itself to a leg that held nothing

    def on_awaiting_kv(self, req: EngineRequest) -> None:
        remote = self._remote.get(req.request_id)
        if kv_fault(self.faults) == "recompute":
            remote = None  # the KV offered is ignored; the prefill holds it until it expires
        if remote is None:  # nothing to fetch from: compute locally
            self.engine.kv_arrived(req.request_id, ok=False, recompute_on_failure=True)
            return
        self._spawn(self._receive(req, remote))

    async def _receive(self, req: EngineRequest, remote: RemoteKV) -> None:
        engine = self.engine
        allocated_at = engine.now()
        tokens = req.prompt_len - 1
        modelled_bytes = tokens * self.model.kv_bytes_per_token
        # Same node when the prefill's KV address is ours; the decode notices the end between
        # its own steps (the engine loop takes kv_arrived at its next step).
        link = self.settings.handoff_link(same_node=remote.host == self.advertised_host)
        modelled_s = link.transfer_seconds(self.model, tokens, self.settings.block_size)
        timeout = self.kv.transfer_timeout_s * engine.time_scale
        try:
            async with asyncio.timeout(timeout):
                if remote.write:
                    pushed_at, size, crc = await self._announce_and_wait(req, remote)
                    ready_at = max(
                        allocated_at + modelled_s, pushed_at + modelled_s / self.model.layers
                    )
                else:
                    size, crc = await self._pull(remote)
                    ready_at = allocated_at + modelled_s
        except (TimeoutError, WireError, OSError) as exc:
            self._transfer_failed(req, remote, str(exc) or type(exc).__name__)
            return
        finally:
            self._remote.pop(req.request_id, None)
        wire_done = engine.now()
        if wire_done > ready_at:
            self.metrics.transfer_overruns += 1
            ready_at = wire_done
        req.kv_seed_delta = crc ^ payload_crc(kv_digest(req.prompt_token_ids), size)
        await engine.sleep_until(ready_at)
        req.kv_transfer = (allocated_at, ready_at, modelled_s)
        self.metrics.on_transfer(modelled_s, modelled_bytes, len(remote.block_ids))
        self.metrics.transfers["ok"] += 1
        engine.kv_arrived(req.request_id, ok=True, recompute_on_failure=False)

    async def _pull(self, remote: RemoteKV, again: bool = True) -> tuple[int, int]:
        """Pull the held KV; returns (payload bytes, their CRC-32)."""
        reader, writer = await asyncio.open_connection(remote.host, remote.port)
        try:
            await send_frame(
                writer,
                {
                    "op": "read",
                    "key": remote.key,
                    "engine_id": remote.engine_id,
                    "block_ids": remote.block_ids,
                    "agent": self.peers.agent(remote.host, remote.port),
                },
            )
            header = await read_frame(reader)
            if header.get("stale") and again:
                await self._stale(remote, header)  # healed: handshake again, once
                return await self._pull(remote, again=False)
            self.peers.learned(remote.host, remote.port, header.get("agent"))
            if not header.get("ok"):
                raise WireError(str(header.get("error", "prefill refused the read")))
            size, crc = await read_payload(reader, int(header["bytes"]))
            self.metrics.wire_bytes["received"] += size
            await send_frame(writer, {"op": "done", "key": remote.key})
            return size, crc
        finally:
            writer.close()

    async def _announce_and_wait(
        self, req: EngineRequest, remote: RemoteKV
    ) -> tuple[float, int, int]:
        """Announce the decode's blocks; returns (when the push began, its bytes, their CRC)."""
        fut = self._pushes.get(remote.key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._pushes[remote.key] = fut
        try:
            for attempt in range(2):
                reader, writer = await asyncio.open_connection(remote.host, remote.port)
                try:
                    await send_frame(
                        writer,
                        {
                            "op": "notify",
                            "key": remote.key,
                            "block_ids": req.block_ids,
                            "host": self.advertised_host,
                            "port": self.kv.kv_port,
                            "agent": self.peers.agent(remote.host, remote.port),
                        },
                    )
                    ack = await read_frame(reader)
                finally:
                    writer.close()
                if not (ack.get("stale") and attempt == 0):
                    break
                await self._stale(remote, ack)  # healed: announce again, once
            self.peers.learned(remote.host, remote.port, ack.get("agent"))
            if not ack.get("ok"):
                raise WireError(str(ack.get("error", "prefill refused the notification")))
            return await fut
        finally:  # pushed, refused, unreachable or timed out: no push is awaited any more
            self._pushes.pop(remote.key, None)

    async def _stale(self, remote: RemoteKV, reply: dict) -> None:
        """The prefill at this address restarted: heal (return), or fail or hang on the
        stale agent as --kv-stale-peer says (simulator/kv/peers.py)."""
        why = self.peers.met_stale(remote.host, remote.port, reply.get("agent"))
        if why is None:
            return
        log.warning("%s", why)
        if self.peers.on_stale == "hang":
            await asyncio.sleep(self.kv.transfer_timeout_s * self.engine.time_scale + 1)
        raise WireError(why)

    def _transfer_failed(self, req: EngineRequest, remote: RemoteKV, why: str) -> None:
        rid, host, port = req.request_id, remote.host, remote.port
        log.warning("KV transfer for %s from %s:%s failed: %s", rid, host, port, why)
        self.metrics.failed_transfers += 1
        self.metrics.transfers["failed"] += 1
        self.failures[req.request_id] = why
        self.engine.kv_arrived(
            req.request_id,
            ok=False,
            recompute_on_failure=self.kv.load_failure_policy == "recompute",
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            frame = await read_frame(reader)
            op = frame.get("op")
            if op == "read":
                await self._serve_read(frame, reader, writer)
            elif op == "notify":
                await self._serve_notify(frame, writer)
            elif op == "push":
                await self._serve_push(frame, reader, writer)
            else:
                await send_frame(writer, {"ok": False, "error": f"unknown op {op!r}"})
        except (WireError, OSError, asyncio.IncompleteReadError) as exc:
            log.info("KV connection ended: %s", exc)
        finally:
            writer.close()

    async def _serve_read(self, frame: dict, reader, writer) -> None:
        if (stale := stale_reply(frame, self.settings.engine_id)) is not None:
            await send_frame(writer, stale)
            return
        key = str(frame.get("key"))
        held = self._held.get(key)
        if held is not None and held.request_id not in self.engine.scheduler.held:
            del self._held[key]  # the abort timeout freed it
            why = f"KV for {key} expired after the abort timeout and was freed"
            held = None
        else:
            why = f"no KV held for {key} (expired, already taken, or never existed)"
        if held is None:
            await send_frame(writer, {"ok": False, "error": why})
            return
        engine_id = frame.get("engine_id")
        if engine_id not in (None, self.settings.engine_id):
            why = f"engine id {engine_id} is not this engine ({self.settings.engine_id})"
            await send_frame(writer, {"ok": False, "error": why})
            return
        size = self.wire_bytes(held.modelled_bytes)
        await send_frame(writer, {"ok": True, "bytes": size, "agent": self.settings.engine_id})
        self.metrics.wire_bytes["sent"] += await send_payload(
            writer, size, held.digest, self._corrupting()
        )
        done = await read_frame(reader)
        if done.get("op") == "done":
            self.release(key)

    async def _serve_notify(self, frame: dict, writer) -> None:
        if (stale := stale_reply(frame, self.settings.engine_id)) is not None:
            await send_frame(writer, stale)
            return
        key = str(frame.get("key"))
        host, port = frame.get("host"), frame.get("port")
        if not isinstance(host, str) or not isinstance(port, int):
            await send_frame(writer, {"ok": False, "error": "notify needs host and port"})
            return
        await send_frame(writer, {"ok": True, "agent": self.settings.engine_id})
        if key in self._held:
            self._spawn(self._push(key, (host, port)))
            return
        now = self.engine.now()
        self._targets[key] = (host, port, now)
        # A decode waits for its push at most the transfer timeout: an older announcement
        # (its prefill failed, was aborted or never came) has nobody left to push to.
        for old, (_, _, at) in list(self._targets.items()):
            if now - at <= self.kv.transfer_timeout_s:
                break  # insertion order is arrival order
            del self._targets[old]

    async def _serve_push(self, frame: dict, reader, writer) -> None:
        key = str(frame.get("key"))
        started = self.engine.now()
        size, crc = await read_payload(reader, int(frame["bytes"]))
        self.metrics.wire_bytes["received"] += size
        fut = self._pushes.get(key)
        if fut is None or fut.done():
            await send_frame(writer, {"ok": False, "error": f"no decode waits for {key}"})
            return
        await send_frame(writer, {"ok": True})
        fut.set_result((started, size, crc))
