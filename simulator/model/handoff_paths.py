"""The ways a prompt's KV can travel from a prefill to a decode, and what each costs.

Three paths: GPUDirect RDMA over the NICs, GPU peer-to-peer inside a node (NVLink or xGMI:
UCX cuda_ipc, MoRI-IO's XGMI backend), and staged through host memory (no P2P and no RDMA:
the bytes are copied device to host in pieces, carried by UCX's TCP lane, copied back).
Every constant names its source; `handoff_model` turns them into a hand-off's parts.
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.kv_connectors import stand_in_backend
from domain.profiles import HardwareProfile


@dataclass(frozen=True, slots=True)
class HandoffPath:
    """The fixed costs of one path; the bandwidth part comes from the hardware (or a flag)."""

    name: str
    title: str
    # Per transfer: the request's metadata to the worker, handles, the completion notice.
    setup_s: float
    # Posting one transfer descriptor (one block of one layer's K or V region).
    per_descriptor_s: float
    # Staged paths copy device <-> host on both sides in pieces of at most chunk_bytes,
    # each piece paying chunk_s (the bytes themselves are the bandwidth part).
    staged: bool = False
    chunk_bytes: int = 0
    chunk_s: float = 0.0


# The setup part is the stand-in's and the planner's former fixed latency (0.2 ms, still
# --kv-link-latency): the order of a ZMQ / NIXL notification round trip plus the worker
# picking the request up. [UNVERIFIED: no public measurement of this part alone.]
SETUP_S = 0.0002

RDMA = HandoffPath(
    name="rdma",
    title="GPUDirect RDMA over the NICs",
    setup_s=SETUP_S,
    # UCX rc_x (InfiniBand verbs). vLLM #55434 (GLM-5.3 on GB200, ~112k descriptors and
    # ~4.9 GB per rank-transfer): posting is ~15% of transfer time on four-rail IB rc_x;
    # at 4 x 400 Gb/s that is ~24.5 ms moving and ~4.3 ms posting: ~0.04 us a descriptor.
    per_descriptor_s=0.04e-6,
)

P2P = HandoffPath(
    name="p2p",
    title="GPU peer-to-peer (NVLink / xGMI)",
    setup_s=SETUP_S,
    # UCX cuda_ipc: one cuMemcpyAsync per descriptor (max_iov 1 in uct cuda_ipc_iface.c).
    # vLLM #55434: cuda_ipc spends 56.9% of the transfer posting (same ~112k descriptors,
    # the same ~24.5 ms of movement), ~32 ms: ~0.29 us a descriptor, "~20x rc_x".
    per_descriptor_s=0.29e-6,
)

HOST = HandoffPath(
    name="host",
    title="staged through host memory (no P2P, no RDMA)",
    setup_s=SETUP_S,
    # Without NVLink, UCX disables cuda_ipc GET and NIXL's READ falls back to the TCP lane
    # (vLLM #52607: 0.5 GB/s against 49 GB/s pushed on the same node; nixl #1097: "cuda-ipc
    # get zcopy disabled as no nvlinks detected"). UCX's TCP transport charges 50 us per
    # operation (uct/tcp/tcp_iface.c: attr->overhead = 50e-6; the nixl #791 trace shows
    # "cpu: 50005.00 ns" per send), one operation per descriptor.
    per_descriptor_s=50e-6,
    staged=True,
    # UCX stages GPU memory through host bounce buffers in rendezvous pipeline fragments
    # (UCX_RNDV_FRAG_SIZE default host:512K); each piece is a cuda_copy operation, 8 us
    # (uct/cuda/cuda_copy/cuda_copy_iface.c: UCT_CUDA_COPY_IFACE_LATENCY 8e-6).
    chunk_bytes=512 * 1024,
    chunk_s=8e-6,
)

PATHS = {p.name: p for p in (RDMA, P2P, HOST)}


def choose_path(
    hardware: HardwareProfile, connector: str = "NixlConnector", same_node: bool = True
) -> HandoffPath:
    """The path a connector takes on this hardware.

    MoRIIO's default backend is RDMA (vLLM moriio_connector.py: BackendType.XGMI only when
    the extra config says backend "xgmi"), inside a node too. NIXL's UCX picks cuda_ipc
    between GPUs of one node with P2P, the NICs between nodes with RDMA, and otherwise
    stages through host memory.
    """
    if stand_in_backend(connector).rdma_in_node and hardware.rdma:
        return RDMA
    if same_node and hardware.p2p:
        return P2P
    if not same_node and hardware.rdma:
        return RDMA
    return HOST


def path_bandwidth(
    path: HandoffPath,
    hardware: HardwareProfile,
    ranks: int = 1,
    same_node: bool = True,
    nics: int | None = None,
) -> float:
    """Bytes/s of the path's bandwidth part: `ranks` TP ranks moving their shards at once,
    over `nics` NICs (None: one per rank, as on a node with a NIC per GPU)."""
    on_nics = hardware.nic_bytes_per_s * (ranks if nics is None else min(ranks, nics))
    if path.name == "rdma":
        return on_nics
    if path.name == "p2p":
        return hardware.gpu_peer_gbps * 1e9 * ranks
    # Staged: the bytes cross PCIe twice (up to host memory, down again), and between nodes
    # the NIC too. UCX's TCP lane is slower still (UCX_TCP_MAX_BW default 2200MBs,
    # uct/tcp/tcp_iface.c), but its cost is counted per operation, in the post part.
    pcie_twice = hardware.pcie_gbps * 1e9 / 2 * ranks
    return pcie_twice if same_node else min(pcie_twice, on_nics)
