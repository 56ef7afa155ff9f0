"""A KV hand-off's time in parts: what a real connector pays around the bytes.

- setup: fixed per transfer (the request's metadata to the worker, handles, the notice).
- post: descriptors x the path's cost per descriptor. vLLM's NIXL connector registers each
  layer's K and V regions and reads one descriptor per block per region (nixl/base_worker.py
  `_compute_desc_ids`: region x num_blocks + block), so a rank posts
  ceil(tokens / block_size) x layers x regions; MoRIIO merges contiguous blocks
  (moriio_connector.py `merge_contiguous_blocks`): one per layer region when they are.
- staging (host path only): device to host on the prefill and host to device on the decode,
  each in pieces: 2 x pieces x per-piece cost, per rank (the bytes are the wire part).
- wire: bytes / bandwidth, the only part `--kv-link-gbps` / `--link-gbps` replaces.
- notice: the decode sees a finished transfer only when it polls between its own steps
  (vLLM calls the connector's get_finished once per engine step), so a busy decode waits
  for the step in progress to end: half a step on average. The planner and the stand-in get
  this part from their clocks (a request whose KV lands mid-step joins the next step);
  `HandoffParts.notice_s` is the expected value for a report.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from domain.kv_connectors import stand_in_backend
from domain.profiles import ModelProfile
from simulator.model.handoff_paths import HandoffPath

# FlashAttention's cache is (2, num_blocks, ...): K and V are separate NIXL regions per layer
# (nixl/base_worker.py register_kv_caches: one region per segment). FlashInfer and MLA
# caches are one region per layer.
KV_REGIONS = 2


def descriptors_per_rank(
    tokens: int, block_size: int, layers: int, connector: str = "NixlConnector"
) -> int:
    """Transfer descriptors one TP rank posts for a prompt of `tokens`."""
    if tokens <= 0:
        return 0
    if stand_in_backend(connector).merges_blocks:
        return layers * KV_REGIONS  # contiguous blocks merged (MoRIIO): a lower bound
    return math.ceil(tokens / block_size) * layers * KV_REGIONS


@dataclass(frozen=True, slots=True)
class HandoffParts:
    path: str
    kv_bytes: float
    descriptors: int  # per rank
    chunks: int  # staged pieces per rank and direction (0 off the host path)
    setup_s: float
    post_s: float
    staging_s: float
    wire_s: float
    notice_s: float

    @property
    def transfer_s(self) -> float:
        """What the connector takes, from the read's start to the KV being ready."""
        return self.setup_s + self.post_s + self.staging_s + self.wire_s

    @property
    def total_s(self) -> float:
        return self.transfer_s + self.notice_s

    @property
    def bandwidth_only_s(self) -> float:
        """What the planner charged before: latency plus bytes over the link."""
        return self.setup_s + self.wire_s

    def as_ms(self) -> dict[str, object]:
        ms = {
            "setup_ms": self.setup_s,
            "post_ms": self.post_s,
            "staging_ms": self.staging_s,
            "wire_ms": self.wire_s,
            "notice_ms": self.notice_s,
            "total_ms": self.total_s,
            "bandwidth_only_ms": self.bandwidth_only_s,
        }
        return {
            "path": self.path,
            "descriptors": self.descriptors,
            "chunks": self.chunks,
            **{k: round(v * 1000, 3) for k, v in ms.items()},
            "times_bandwidth": round(self.total_s / self.bandwidth_only_s, 1)
            if self.bandwidth_only_s > 0
            else None,
        }


@dataclass(frozen=True, slots=True)
class HandoffLink:
    """A prefill-decode pair's path: everything about a hand-off but the prompt."""

    path: HandoffPath
    bandwidth_bytes_s: float
    ranks: int = 1  # TP ranks moving their shards at once
    connector: str = "NixlConnector"
    setup_s: float | None = None  # None: the path's

    def parts(
        self, model: ModelProfile, tokens: int, block_size: int, decode_step_s: float = 0.0
    ) -> HandoffParts:
        return handoff_parts(
            self.path,
            model,
            tokens,
            block_size,
            self.bandwidth_bytes_s,
            ranks=self.ranks,
            connector=self.connector,
            decode_step_s=decode_step_s,
            setup_s=self.setup_s,
        )

    def transfer_seconds(self, model: ModelProfile, tokens: int, block_size: int) -> float:
        return self.parts(model, tokens, block_size).transfer_s


def handoff_parts(
    path: HandoffPath,
    model: ModelProfile,
    tokens: int,
    block_size: int,
    bandwidth_bytes_s: float,
    ranks: int = 1,
    connector: str = "NixlConnector",
    decode_step_s: float = 0.0,
    setup_s: float | None = None,
) -> HandoffParts:
    """The parts of moving `tokens` tokens' KV over `path` (see the module docstring)."""
    if block_size < 1 or ranks < 1 or bandwidth_bytes_s <= 0:
        raise ValueError("block_size, ranks and bandwidth must be positive")
    if tokens <= 0:
        return HandoffParts(path.name, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
    kv_bytes = tokens * model.kv_bytes_per_token
    descriptors = descriptors_per_rank(tokens, block_size, model.layers, connector)
    chunks, staging_s = 0, 0.0
    if path.staged:
        rank_bytes = kv_bytes / ranks
        pieces_each = math.ceil(rank_bytes / descriptors / path.chunk_bytes)
        chunks = descriptors * pieces_each
        staging_s = 2 * chunks * path.chunk_s
    return HandoffParts(
        path=path.name,
        kv_bytes=kv_bytes,
        descriptors=descriptors,
        chunks=chunks,
        setup_s=path.setup_s if setup_s is None else setup_s,
        post_s=descriptors * path.per_descriptor_s,
        staging_s=staging_s,
        wire_s=kv_bytes / bandwidth_bytes_s,
        notice_s=decode_step_s / 2,
    )
