"""KV-cache sizes and transfer times: the back-of-envelope an operator needs before a split.

The bandwidth-only figures are the floor (bytes over the link); the hand-off table adds
what connectors pay around the bytes, per path (simulator/model/handoff.py).
"""

from __future__ import annotations

from typing import Any

from domain.engine.defaults import CPU_BLOCK_SIZE, GPU_BLOCK_SIZE
from domain.profiles import HardwareProfile, ModelProfile
from simulator.model.handoff import handoff_parts
from simulator.model.handoff_paths import PATHS, choose_path, path_bandwidth
from simulator.model.timing import TimingModel, kv_transfer_seconds

# The decode batch whose step time sets the expected wait for the decode to notice a
# finished transfer: 32 running sequences, each with a context as long as the prompt.
NOTICE_BATCH = 32


def kv_report(
    model: ModelProfile,
    hardware: HardwareProfile,
    tokens: int,
    tp: int = 1,
    link_gbps: float | None = None,
    connector: str = "NixlConnector",
    block_size: int | None = None,
    decode_step_ms: float | None = None,
) -> dict[str, Any]:
    """Bytes of a prompt's KV cache and how long it takes to move over each path."""
    total = tokens * model.kv_bytes_per_token
    nic = hardware.nic_bytes_per_s * tp
    # In one node: GPU to GPU directly with P2P, else staged through host memory (PCIe twice).
    peer = hardware.gpu_peer_gbps * 1e9 * tp if hardware.p2p else hardware.pcie_gbps * 1e9 / 2
    report: dict[str, Any] = {
        "model": model.name,
        "tokens": tokens,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "kv_bytes": total,
        "kv_gb": round(total / 1e9, 3),
        "rdma_nics": f"{tp} x {hardware.nic_gbit:g} Gb/s",
        "rdma_transfer_ms": round(kv_transfer_seconds(tokens, model, nic, 0) * 1000, 2),
        "in_node_path": "GPU peer-to-peer" if hardware.p2p else "through host memory (no P2P)",
        "in_node_transfer_ms": round(kv_transfer_seconds(tokens, model, peer, 0) * 1000, 2),
    }
    if link_gbps is not None:
        report["given_link_transfer_ms"] = round(
            kv_transfer_seconds(tokens, model, link_gbps * 1e9, 0) * 1000, 2
        )
    report.update(
        handoff_table(model, hardware, tokens, tp, link_gbps, connector, block_size, decode_step_ms)
    )
    return report


def handoff_table(
    model: ModelProfile,
    hardware: HardwareProfile,
    tokens: int,
    tp: int,
    link_gbps: float | None,
    connector: str,
    block_size: int | None,
    decode_step_ms: float | None,
) -> dict[str, object]:
    """The hand-off's parts over every path the hardware has, and which one each case takes."""
    if block_size is None:
        block_size = CPU_BLOCK_SIZE if hardware.name == "cpu" else GPU_BLOCK_SIZE
    if decode_step_ms is None:
        timing = TimingModel(model, hardware, tp)
        step_s = timing.decode_step_seconds(NOTICE_BATCH, NOTICE_BATCH * tokens)
    else:
        step_s = decode_step_ms / 1000
    rows = []
    for path in PATHS.values():
        if (path.name == "rdma" and not hardware.rdma) or (path.name == "p2p" and not hardware.p2p):
            continue
        bandwidth = link_gbps * 1e9 if link_gbps is not None else path_bandwidth(path, hardware, tp)
        parts = handoff_parts(
            path, model, tokens, block_size, bandwidth, tp, connector, decode_step_s=step_s
        )
        rows.append({"title": path.title, "gbps": round(bandwidth / 1e9, 3), **parts.as_ms()})
    return {
        "connector": connector,
        "block_size": block_size,
        "decode_step_ms": round(step_s * 1000, 3),
        "handoff": rows,
        "path_in_node": choose_path(hardware, connector, same_node=True).name,
        "path_across_nodes": choose_path(hardware, connector, same_node=False).name,
    }
