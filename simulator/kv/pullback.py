"""Bidirectional KV for multi-turn (NIXL's `bidirectional_kv_xfer`, PROTOCOL.md 4b) in the
stand-in: a decode keeps a finished turn's blocks for `decoder_kv_blocks_ttl` and answers
with kv_transfer_params naming them; the conversation's next prefill, given those params,
pulls the blocks back over the stand-in's KV wire (simulator/kv/transfer.py serves the read as
it serves a decode's) and computes only the tokens after them.

The pulled bytes are the held sequence's (kv_wire.kv_digest of prompt + answer): a prefill
whose prompt does not start with exactly that sequence sees a CRC that is not its own prefix's
and computes everything itself, as it does when the pull fails (the KV is an optimisation
here; a prefill has no one to fail the request for).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from domain.workload import tokenizer
from simulator.engine.request import EngineRequest, KVRole
from simulator.kv.transfer import RemoteKV, _Held
from simulator.kv.wire import WireError, kv_digest, payload_crc

if TYPE_CHECKING:
    from simulator.config.engine import KVTransferSettings
    from simulator.kv.transfer import KVTransferAgent

log = logging.getLogger("pdctl.sim.kv")

BIDIR_KEY = "bidirectional_kv_xfer"
TTL_KEY = "decoder_kv_blocks_ttl"
# vLLM frees blocks no peer took after VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by default);
# a decode's blocks kept for the next turn default to the same lease.
DEFAULT_TTL_S = 480.0


@dataclass(frozen=True, slots=True)
class PullBack:
    """Where a prefill leg's earlier-turn KV is held: the decode's read address and how many
    tokens' KV it holds (the turn's prompt and answer but the answer's last token)."""

    remote: RemoteKV
    num_tokens: int


def enabled(kv: KVTransferSettings | None) -> bool:
    # The stand-in pulls back on every connector with NIXL's transport (MoRIIO's has none).
    return kv is not None and not kv.backend.transfer_id and kv.extra.get(BIDIR_KEY) is True


def blocks_ttl(kv: KVTransferSettings) -> float:
    ttl = kv.extra.get(TTL_KEY, DEFAULT_TTL_S)
    return float(ttl) if isinstance(ttl, int | float) and ttl > 0 else DEFAULT_TTL_S


def parse_pull_back(params: dict[str, Any]) -> PullBack | None:
    """A prefill leg's params that also name a decode's held blocks (do_remote_prefill on a
    do_remote_decode request), or None when they name none or name them badly."""
    if not params.get("do_remote_prefill"):
        return None
    try:
        blocks = params["remote_block_ids"]
        flat = [int(b) for item in blocks for b in (item if isinstance(item, list) else [item])]
        remote = RemoteKV(
            key=str(params["remote_request_id"]),
            host=str(params["remote_host"]),
            port=int(params["remote_port"]),
            engine_id=str(params["remote_engine_id"]),
            block_ids=flat,
            write=False,
        )
        return PullBack(remote, int(params["remote_num_tokens"]))
    except (KeyError, TypeError, ValueError):
        log.warning("Got invalid KVTransferParams for a pull-back; computing the prompt")
        return None


def keep_for_next_turn(
    agent: KVTransferAgent, ereq: EngineRequest, engine_id: str, tp_size: int
) -> dict[str, Any] | None:
    """A decode leg that finished: its blocks stay held (the scheduler kept them, keep_kv_s)
    under its request id, and its answer names them in NIXL's shape."""
    if ereq.kv_role is not KVRole.REMOTE_PREFILL or ereq.kv_hold_deadline is None:
        return None
    if ereq.finish_reason not in ("length", "stop") or not ereq.block_ids:
        return None
    seed = tokenizer.prompt_seed(ereq.prompt_token_ids) ^ ereq.kv_seed_delta
    answer = tokenizer.output_token_ids(ereq.prompt_token_ids, 0, ereq.num_output_tokens, seed)
    sequence = [*ereq.prompt_token_ids, *answer]
    held_tokens = len(sequence) - 1  # the last answer token was sampled, never computed
    modelled = held_tokens * agent.model.kv_bytes_per_token
    # Private to kv_transfer.py, whose read server serves it like a prefill's held KV; that
    # module is at its size limit, so the decode's side of the hand-off lives here.
    _sweep(agent)
    agent._held[ereq.request_id] = _Held(
        ereq.request_id, modelled, len(ereq.block_ids), kv_digest(sequence)
    )
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [list(ereq.block_ids)],
        "remote_engine_id": engine_id,
        "remote_request_id": ereq.request_id,
        "remote_host": agent.advertised_host,
        "remote_port": agent.kv.kv_port,
        "tp_size": tp_size,
        "remote_num_tokens": held_tokens,
        "transfer_mode": "pull",
    }


def _sweep(agent: KVTransferAgent) -> None:
    """Drop held entries whose blocks the scheduler freed without telling the agent (a kept
    turn that gave way to a request, scheduler._room): only a read would have found them
    out, and a kept turn is often never read. Amortised: only once they outnumber the live."""
    live = agent.engine.scheduler.held
    if len(agent._held) > 2 * len(live) + 64:
        for key in [k for k, h in agent._held.items() if h.request_id not in live]:
            del agent._held[key]


async def pull_back(agent: KVTransferAgent, ereq: EngineRequest, pull: PullBack) -> None:
    """Before the prefill leg is scheduled: pull the earlier turn's KV and mark those tokens
    computed (external), waiting out the modelled transfer; on any failure, compute them."""
    engine, n, outcomes = agent.engine, pull.num_tokens, agent.metrics.pullbacks
    if not 0 < n < ereq.prompt_len:
        outcomes["mismatch"] += 1
        return
    started = engine.now()
    link = agent.settings.handoff_link(same_node=pull.remote.host == agent.advertised_host)
    modelled_s = link.transfer_seconds(agent.model, n, agent.settings.block_size)
    try:
        async with asyncio.timeout(agent.kv.transfer_timeout_s * engine.time_scale):
            size, crc = await agent._pull(pull.remote)
    except (TimeoutError, WireError, OSError) as exc:
        log.warning("pull-back of %s failed: %s; computing the prompt", pull.remote.key, exc)
        outcomes["failed"] += 1
        return
    if crc != payload_crc(kv_digest(ereq.prompt_token_ids[: n + 1]), size):
        outcomes["mismatch"] += 1
        return
    await engine.sleep_until(max(started + modelled_s, engine.now()))
    ereq.num_computed_tokens = ereq.num_external_tokens = n
    outcomes["ok"] += 1
