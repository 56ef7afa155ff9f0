"""Pure port allocation: every port a deployment needs, from its spec and a free range.

Given ports are kept; missing ones are taken from `port_range`, skipping everything in
`taken` (other deployments' ports, ports busy on the host). Which KV ports an instance gets,
its connector's backend says; handshake and notify ports (MoRIIO's) are bases: each TP rank
adds its offset, so `tp` consecutive ports are claimed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controller.spec.deployment import DeploymentSpec, InstancePorts
from domain.errors import Conflict
from domain.modes import Role

DEFAULT_RANGE = (20000, 29999)


class PortsExhausted(Conflict):
    """The range has no room left for what the deployment needs (a 409)."""


@dataclass(frozen=True, slots=True)
class AllocatedPorts:
    proxy: int
    registry: int
    instances: dict[str, InstancePorts] = field(default_factory=dict)  # by instance name

    def claimed(self, spec: DeploymentSpec) -> set[int]:
        """Every port this deployment occupies, per-rank offsets included."""
        ports = {self.proxy, self.registry}
        for group in spec.groups:
            for i in range(group.count):
                p = self.instances[f"{group.name}-{i}"]
                ports.update(x for x in (p.http, p.side_channel) if x is not None)
                for base in (p.handshake, p.notify):
                    if base is not None:
                        ports.update(range(base, base + group.tp))
        return ports


class _Cursor:
    def __init__(self, taken: Iterable[int], port_range: tuple[int, int]) -> None:
        self.taken = set(taken)
        self.next, self.last = port_range

    def claim(self, port: int, width: int = 1) -> int:
        self.taken.update(range(port, port + width))
        return port

    def take_if(self, wanted: bool, width: int = 1) -> int | None:
        return self.take(width) if wanted else None

    def take(self, width: int = 1) -> int:
        while self.next + width - 1 <= self.last:
            start = self.next
            self.next += 1
            if all(p not in self.taken for p in range(start, start + width)):
                return self.claim(start, width)
        raise PortsExhausted(
            f"no {width} free consecutive port(s) left in the port range ending at {self.last}"
        )


def allocate(
    spec: DeploymentSpec, taken: Iterable[int] = (), port_range: tuple[int, int] = DEFAULT_RANGE
) -> AllocatedPorts:
    cursor = _Cursor(taken, port_range)
    given = _given(spec)
    for port, width in given:
        cursor.claim(port, width)
    proxy = spec.proxy.port or cursor.take()
    registry = spec.proxy.registry_port or cursor.take()
    instances: dict[str, InstancePorts] = {}
    needs = kv_ports(spec)
    for group in spec.groups:
        # A render instance moves no KV: HTTP only.
        wants = needs if group.role is not Role.RENDER else frozenset()
        for i in range(group.count):
            p = group.ports[i] if group.ports else InstancePorts()
            instances[f"{group.name}-{i}"] = InstancePorts(
                http=p.http or cursor.take(),
                handshake=p.handshake or cursor.take_if("handshake" in wants, group.tp),
                notify=p.notify or cursor.take_if("notify" in wants, group.tp),
                side_channel=p.side_channel or cursor.take_if("side_channel" in wants),
            )
    return AllocatedPorts(proxy, registry, instances)


def kv_ports(spec: DeploymentSpec) -> frozenset[str]:
    """The KV ports (InstancePorts fields) its connector needs; none when colocated."""
    kv = spec.kv_backend
    return kv.kv_ports if kv is not None else frozenset()


def _given(spec: DeploymentSpec) -> list[tuple[int, int]]:
    out = [(p, 1) for p in (spec.proxy.port, spec.proxy.registry_port) if p]
    for group in spec.groups:
        for p in group.ports:
            out += [(x, 1) for x in (p.http, p.side_channel) if x]
            out += [(x, group.tp) for x in (p.handshake, p.notify) if x]
    return out
