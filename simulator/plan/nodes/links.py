"""The link each prefill->decode hand-off takes: inside a node (GPU peer-to-peer, or RDMA where
the connector uses it in a node too) or between nodes (the NICs, shared by the node's GPUs),
and its bandwidth. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from domain.profiles import HardwareProfile
from simulator.model.handoff import HandoffLink
from simulator.model.handoff_paths import HandoffPath, choose_path, path_bandwidth
from simulator.plan.nodes.placement import Placement


@dataclass(frozen=True, slots=True)
class Fabric:
    """What a hand-off can use: the node's hardware (its NIC speed as given), the connector,
    how many NICs a node has, and a fixed bandwidth (--link-gbps) overriding the path's."""

    hardware: HardwareProfile
    connector: str
    nics_per_node: int
    link_gbps: float | None = None  # GB/s for every pair
    setup_s: float = 0.0002
    # The hand-off as calibrated (a setup and a time per token, link_gbps the latter): what
    # the path's descriptors and staging cost is in the measurement, not charged again.
    measured: bool = False

    def link(self, same_node: bool, ranks: int) -> HandoffLink:
        """The hand-off of a pair whose smaller side has `ranks` TP ranks (each moves its
        shard at once, over its own peer link, or over the NICs of its node)."""
        path = choose_path(self.hardware, self.connector, same_node)
        if self.measured:
            path = measured_path(self.setup_s)
        bandwidth = (
            self.link_gbps * 1e9
            if self.link_gbps is not None
            else path_bandwidth(path, self.hardware, ranks, same_node, self.nics_per_node)
        )
        return HandoffLink(
            path, bandwidth, ranks=ranks, connector=self.connector, setup_s=self.setup_s
        )


def measured_path(setup_s: float) -> HandoffPath:
    """A calibrated hand-off: its setup, then only the bytes at the measured rate."""
    return HandoffPath("measured", "as calibrated: a setup, then a time per token", setup_s, 0.0)


def pair_links(
    fabric: Fabric, placement: Placement, ranks: int, same_node: bool = True
) -> list[list[HandoffLink]]:
    """[prefill][decode]: the link of every pair (`same_node` False: none shares a node)."""
    inside, across = fabric.link(same_node, ranks), fabric.link(False, ranks)
    return [
        [inside if same_node and placement.same_node(p, d) else across for d in range(len(ds))]
        for p, ds in ((p, placement.decodes) for p in range(len(placement.prefills)))
    ]


def used_pairs(prefills: int, decodes: int) -> list[tuple[int, int]]:
    """The pairs the proxy sends to: request i goes to prefill i % P and decode i % D."""
    return [(i % prefills, i % decodes) for i in range(math.lcm(prefills, decodes))]


def describe(
    links: list[list[HandoffLink]], placement: Placement, same_node: bool = True
) -> list[dict]:
    """The hand-offs the proxy makes, grouped by link: where, path, GB/s, and the pairs."""
    groups: dict[tuple[str, str, float], list[str]] = {}
    for p, d in used_pairs(len(placement.prefills), len(placement.decodes)):
        link = links[p][d]
        where = "in-node" if same_node and placement.same_node(p, d) else "inter-node"
        key = (where, link.path.name, round(link.bandwidth_bytes_s / 1e9, 3))
        groups.setdefault(key, []).append(f"P{p}->D{d}")
    return [
        {"link": where, "path": path, "gbps": gbps, "pairs": pairs}
        for (where, path, gbps), pairs in groups.items()
    ]
