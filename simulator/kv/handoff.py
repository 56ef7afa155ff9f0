"""Pure: what a request's kv_transfer_params (and X-Request-Id) ask of this engine, and the
kv_transfer_params a prefill answers with, in NIXL's and MoRIIO's shapes (PROTOCOL.md 3)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulator.config.engine import KVTransferSettings
from simulator.engine.request import KVRole
from simulator.kv.pullback import PullBack, parse_pull_back
from simulator.kv.transfer import RemoteKV
from simulator.protocol.request import RequestError

log = logging.getLogger("pdctl.sim.handoff")

NIXL_REQUIRED = (
    "remote_block_ids",
    "remote_engine_id",
    "remote_request_id",
    "remote_host",
    "remote_port",
)
_PEER = re.compile(r"host:(?P<host>[^,]+),handshake:(?P<handshake>\d+),notify:(?P<notify>\d+)")
_REQUEST_ID = re.compile(
    r"___prefill_addr_(?P<prefill>.+?)___decode_addr_(?P<decode>.+)_[0-9a-f]{32}$"
)


@dataclass(frozen=True, slots=True)
class Peer:
    host: str
    handshake: int
    notify: int


@dataclass(frozen=True, slots=True)
class Handoff:
    role: KVRole
    key: str | None = None  # how the decode will name this request to the prefill
    remote: RemoteKV | None = None
    pull_back: PullBack | None = None  # a prefill leg's earlier-turn KV (bidirectional)


LOCAL = Handoff(KVRole.LOCAL)


def parse_peer(zmq_address: str) -> Peer | None:
    match = _PEER.fullmatch(zmq_address.strip())
    if match is None:
        return None
    return Peer(match["host"], int(match["handshake"]), int(match["notify"]))


def peers_from_request_id(header: str | None) -> tuple[Peer | None, Peer | None]:
    """The prefill and decode addresses a MoRIIO proxy puts in X-Request-Id."""
    if not header:
        return None, None
    match = _REQUEST_ID.match(header)
    if match is None:
        return None, None
    return parse_peer(match["prefill"]), parse_peer(match["decode"])


def plan_handoff(
    params: dict[str, Any] | None,
    kv: KVTransferSettings | None,
    request_id: str,
    headers: Mapping[str, str],
) -> Handoff:
    """Decide this request's role from its kv_transfer_params."""
    if not params or kv is None:
        return LOCAL
    if params.get("do_remote_decode"):
        if kv.backend.transfer_id:
            return Handoff(KVRole.REMOTE_DECODE, key=_transfer_id(params))
        return Handoff(KVRole.REMOTE_DECODE, key=request_id, pull_back=parse_pull_back(params))
    if not params.get("do_remote_prefill"):
        return LOCAL
    if kv.backend.transfer_id:
        return _moriio_decode(params, kv, headers)
    missing = [k for k in NIXL_REQUIRED if params.get(k) in (None, "", [])]
    if missing:
        # Real vLLM 0.32 logs "Got invalid KVTransferParams" and then hangs the request and
        # kills its EngineCore, or asserts at once (fixtures decode_invalid_params*,
        # decode_missing_block_ids*). The stand-in deliberately does not copy that: a crash
        # teaches the proxy nothing a test cannot assert more cheaply, and would take every
        # other request down with it. It logs vLLM's warning and computes the prompt itself.
        log.warning("Got invalid KVTransferParams (missing %s); computing locally", missing)
        return LOCAL
    remote = RemoteKV(
        key=str(params["remote_request_id"]),
        host=str(params["remote_host"]),
        port=_int(params["remote_port"], "remote_port"),
        engine_id=str(params["remote_engine_id"]),
        block_ids=_flat_blocks(params["remote_block_ids"]),
        write=False,
    )
    return Handoff(KVRole.REMOTE_PREFILL, key=remote.key, remote=remote)


def _moriio_decode(
    params: dict[str, Any], kv: KVTransferSettings, headers: Mapping[str, str]
) -> Handoff:
    transfer_id = _transfer_id(params)
    prefill, _ = peers_from_request_id(headers.get("X-Request-Id"))
    host = params.get("remote_host") or (prefill.host if prefill else None)
    if kv.read_mode:
        port = params.get("remote_handshake_port") or (prefill.handshake if prefill else None)
    else:
        port = params.get("remote_notify_port") or (prefill.notify if prefill else None)
    if host is None or port is None:
        raise RequestError(
            "kv_transfer_params: no prefill address (remote_host and port, or "
            "X-Request-Id with ___prefill_addr_)",
            param="kv_transfer_params",
        )
    blocks = params.get("remote_block_ids")
    if kv.read_mode and not blocks:
        raise RequestError(
            "kv_transfer_params.remote_block_ids is required in READ mode",
            param="kv_transfer_params.remote_block_ids",
        )
    remote = RemoteKV(
        key=transfer_id,
        host=str(host),
        port=_int(port, "remote port"),
        engine_id=params.get("remote_engine_id"),
        block_ids=_flat_blocks(blocks or []),
        write=not kv.read_mode,
    )
    return Handoff(KVRole.REMOTE_PREFILL, key=transfer_id, remote=remote)


def prefill_response_params(
    kv: KVTransferSettings,
    engine_id: str,
    host: str,
    request_id: str,
    key: str,
    block_ids: list[int],
    prompt_len: int,
    tp_size: int,
    cached_tokens: int,
) -> dict[str, Any]:
    """What a prefill returns so that the decode can find its KV (NIXL: vLLM 0.32's exact key
    order, fixture prefill_response.json; cached_tokens: the prefill's own prefix-cache hit)."""
    if kv.backend.transfer_id:
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": block_ids,
            "remote_engine_id": engine_id,
            "remote_host": host,
            "remote_handshake_port": kv.kv_port,
            "remote_notify_port": kv.notify_port,
            "remote_dp_size": 1,
            "tp_size": tp_size,
            "transfer_id": key,
        }
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [block_ids],
        "remote_engine_id": engine_id,
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": kv.kv_port,
        "tp_size": tp_size,
        "dcp_size": 1,
        "pp_size": 1,
        "remote_num_tokens": prompt_len,
        "remote_blocks_expiry_time": None,
        "transfer_mode": "pull",
        "remote_prefill_cached_tokens": cached_tokens,
    }


def _transfer_id(params: dict[str, Any]) -> str:
    transfer_id = params.get("transfer_id")
    if not isinstance(transfer_id, str) or not transfer_id:
        raise RequestError(
            "kv_transfer_params.transfer_id is required by MoRIIOConnector",
            param="kv_transfer_params.transfer_id",
        )
    return transfer_id


def _flat_blocks(blocks: Any) -> list[int]:
    """Block ids, flattening vLLM 0.32's per-KV-cache-group nesting ([[1, 2, 3]])."""
    if not isinstance(blocks, list):
        raise RequestError(
            "remote_block_ids must be a list", param="kv_transfer_params.remote_block_ids"
        )
    flat: list[int] = []
    for item in blocks:
        if isinstance(item, list):
            flat.extend(int(b) for b in item)
        else:
            flat.append(int(item))
    return flat


def _int(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise RequestError(
            f"kv_transfer_params: {name} must be an integer", param="kv_transfer_params"
        ) from None
