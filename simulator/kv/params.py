"""The kv_transfer_params an engine answers with, and a leg's KV work before it is scheduled:
a prefill leg's hand-off (NIXL/MoRIIO shapes, simulator/kv/handoff.py), a decode leg's blocks
kept for the next turn, and a prefill leg's pull-back of them (bidirectional KV,
simulator/kv/pullback.py)."""

from __future__ import annotations

from typing import Any

from simulator.engine.request import EngineRequest, KVRole
from simulator.kv import pullback as kv_pullback
from simulator.kv.handoff import Handoff, prefill_response_params
from simulator.kv.transfer import KVTransferAgent


async def before_submit(
    agent: KVTransferAgent | None, ereq: EngineRequest, handoff: Handoff
) -> None:
    """A decode leg on a bidirectional engine keeps its blocks when done; a prefill leg
    naming an earlier turn's blocks pulls them first (its TTFT includes the pull)."""
    kv = agent.kv if agent is not None else None
    on = kv_pullback.enabled(kv)
    if handoff.role is KVRole.REMOTE_PREFILL and on and kv is not None:
        ereq.keep_kv_s = kv_pullback.blocks_ttl(kv)
    if handoff.pull_back is None or agent is None:
        return
    if not on:  # vLLM without bidirectional_kv_xfer ignores them and computes the prompt
        agent.metrics.pullbacks["off"] += 1
        return
    await kv_pullback.pull_back(agent, ereq, handoff.pull_back)


def response_params(
    agent: KVTransferAgent | None,
    ereq: EngineRequest,
    handoff: Handoff,
    engine_id: str,
    tp_size: int,
) -> dict[str, Any] | None:
    """A prefill leg that stopped on length hands its KV on (vLLM returns params only then);
    a decode leg that kept its blocks names them for the next turn."""
    if agent is None or handoff.key is None:
        return None
    if handoff.role is KVRole.REMOTE_PREFILL:
        return kv_pullback.keep_for_next_turn(agent, ereq, engine_id, tp_size)
    if handoff.role is not KVRole.REMOTE_DECODE or ereq.finish_reason != "length":
        return None
    agent.prefill_done(handoff.key, ereq)
    return prefill_response_params(
        agent.kv,
        engine_id,
        agent.advertised_host,
        ereq.request_id,
        handoff.key,
        list(ereq.block_ids),
        ereq.prompt_len,
        tp_size,
        ereq.num_cached_tokens,
    )
