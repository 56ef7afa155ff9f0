"""The registrations a MoRIIO deployment's proxy should accept: exactly the instances the
controller launched, each with the URL, role, mode, ZMQ ports and TP size it was started with
(connector/registry/trust.py judges them). A mode switch lets every instance register in both
modes while it runs, and narrows the set again when it ends. Pure.
"""

from __future__ import annotations

import json

from controller.launch.placement import Addresses
from controller.launch.ports import AllocatedPorts
from controller.spec.deployment import DeploymentSpec, Role

EXPECTED_ENV = "PDCTL_REGISTRY_EXPECTED"  # what `pdctl proxy --registry-expected` reads


def expected_registrations(
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    addresses: Addresses,
    also_modes: tuple[str, ...] = (),
) -> list[dict]:
    """One entry per prefill and decode instance, in its group's mode and `also_modes`, at
    the address the instance listens on (its node's)."""
    entries = []
    for group in spec.groups:
        if group.role not in (Role.PREFILL, Role.DECODE):
            continue
        mode = group.mode.value if group.mode else "read"
        for index in range(group.count):
            name = f"{group.name}-{index}"
            own = ports.instances[name]
            host = addresses.of(name)
            entries.append(
                {
                    "url": f"http://{host}:{own.http}",
                    "role": group.role.value,
                    "modes": sorted({mode, *also_modes}),
                    "zmq_address": f"host:{host},handshake:{own.handshake},notify:{own.notify}",
                    "tp_size": group.tp,
                    "dp_size": 1,
                }
            )
    return entries


def expected_env(
    spec: DeploymentSpec, ports: AllocatedPorts, addresses: Addresses
) -> dict[str, str]:
    return {EXPECTED_ENV: json.dumps(expected_registrations(spec, ports, addresses))}
