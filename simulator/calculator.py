"""KV-cache sizes and transfer times: the back-of-envelope an operator needs before a split."""

from __future__ import annotations

from domain.profiles import HardwareProfile, ModelProfile
from simulator.timing import kv_transfer_seconds


def kv_report(
    model: ModelProfile,
    hardware: HardwareProfile,
    tokens: int,
    tp: int = 1,
    link_gbps: float | None = None,
) -> dict[str, object]:
    """Bytes of a prompt's KV cache and how long it takes to move over each path."""
    total = tokens * model.kv_bytes_per_token
    nic = hardware.nic_bytes_per_s * tp
    # In one node: GPU to GPU directly with P2P, else staged through host memory (PCIe twice).
    peer = hardware.gpu_peer_gbps * 1e9 * tp if hardware.p2p else hardware.pcie_gbps * 1e9 / 2
    report: dict[str, object] = {
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
    return report
