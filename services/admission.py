"""Admitting a spec: every check (controller/spec/validation.py) and then its ports, allocated
from the range around other deployments' ports and ports busy on the host. An update keeps
the ports its instances already have (`sticky`), so running instances need not move."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from controller import (
    AllocatedPorts,
    DeploymentSpec,
    EngineReach,
    InstancePorts,
    PortsExhausted,
    StoredSpec,
    address_problems,
    allocate,
    given_ports,
    validate,
)
from domain.errors import Conflict, Problem, SpecInvalid


@dataclass(frozen=True, slots=True)
class Admission(StoredSpec):
    """What the store needs from the world to admit a spec: settings and the host's ports.
    The store's rules (state/store/rules.py `SpecRules`): StoredSpec's reading, and writing here."""

    port_range: tuple[int, int]
    allow_code_env: bool
    is_busy: Callable[[int], bool]
    reserved: frozenset[int] = frozenset()  # e.g. the control plane's own port
    # The roots engines' paths may be under and the address they bind (none: loopback only).
    reach: EngineReach | None = None
    # Hosts beyond loopback an attached spec may name (PDCTL_ATTACH_HOSTS).
    attach_hosts: tuple[str, ...] = ()

    def admit(
        self,
        spec: DeploymentSpec,
        others: Mapping[int, str],
        previous: tuple[DeploymentSpec, AllocatedPorts] | None,
    ) -> AllocatedPorts:
        return admit(self, spec, others, previous)

    def renamed(self, name: str, spec: DeploymentSpec) -> SpecInvalid | None:
        if spec.name == name:
            return None
        return SpecInvalid(
            [
                Problem(
                    ("name",),
                    f"the body names {spec.name!r} but the URL "
                    f"{name!r}; a deployment cannot be renamed: clone it",
                )
            ]
        )

    def fresh(self, spec: DeploymentSpec, name: str) -> DeploymentSpec:
        copy = without_given_ports(spec).model_copy(update={"name": name})
        return DeploymentSpec.model_validate(copy.model_dump())


def admit(
    admission: Admission,
    spec: DeploymentSpec,
    others: Mapping[int, str],
    previous: tuple[DeploymentSpec, AllocatedPorts] | None,
) -> AllocatedPorts:
    """The ports `spec` gets, or SpecInvalid listing every problem. `others` maps each port
    other deployments claim to its owner; `previous` is this deployment's current revision."""
    own = previous[1].claimed(previous[0]) if previous else set()
    problems = validate(
        spec,
        claimed_by_others=others,
        is_busy=admission.is_busy,
        allow_code_env=admission.allow_code_env,
        own_ports=own,
        reach=admission.reach,
    )
    problems += address_problems(spec, admission.attach_hosts)
    if problems:
        raise SpecInvalid(problems)
    sticky = _sticky(spec, *previous) if previous else spec
    # A new instance never takes a port the current revision holds, even one free on the host
    # now (its process dead or restarting): those instances run on until a rollout stops
    # them, and a rollback starts them again on those very ports. Kept ones are given.
    return _allocate(admission, sticky, spec, set(others) | admission.reserved | own)


def _allocate(
    admission: Admission, sticky: DeploymentSpec, spec: DeploymentSpec, taken: set[int]
) -> AllocatedPorts:
    given = {p for _, base, width, _ in given_ports(sticky) for p in range(base, base + width)}
    for _ in range(100):
        try:
            ports = allocate(sticky, taken, admission.port_range)
        except PortsExhausted as err:
            raise Conflict(f"cannot allocate ports for {spec.name!r}: {err}") from None
        busy = {p for p in ports.claimed(spec) - given if admission.is_busy(p)}
        if not busy:
            return ports
        taken |= busy  # allocation skips ports busy on the host
    raise Conflict(
        f"cannot allocate ports for {spec.name!r}: too many ports busy on the "
        "host in the port range"
    )


def without_given_ports(spec: DeploymentSpec) -> DeploymentSpec:
    """A copy asking for fresh ports: a clone cannot share its source's explicit ones."""
    groups = [g.model_copy(update={"ports": []}) for g in spec.groups]
    proxy = spec.proxy.model_copy(update={"port": None, "registry_port": None})
    return spec.model_copy(update={"groups": groups, "proxy": proxy})


def _sticky(spec: DeploymentSpec, old_spec: DeploymentSpec, old: AllocatedPorts) -> DeploymentSpec:
    """`spec` with the ports it leaves out filled from the previous allocation, so an update
    does not move running instances. Only for groups whose TP (and so port width) is kept."""
    kv = spec.kv_backend  # which KV ports its connector has (domain/kv_connectors/)
    needs = kv.kv_ports if kv is not None else frozenset()
    given = {p for _, base, width, _ in given_ports(spec) for p in range(base, base + width)}

    def keep(port: int | None, width: int = 1) -> int | None:
        free = port is not None and given.isdisjoint(range(port, port + width))
        return port if free else None

    old_tp = {g.name: g.tp for g in old_spec.groups}
    groups = []
    for group in spec.groups:
        if old_tp.get(group.name) != group.tp:
            groups.append(group)
            continue
        ports = []
        for i in range(group.count):
            mine = group.ports[i] if group.ports else InstancePorts()
            prev = old.instances.get(f"{group.name}-{i}", InstancePorts())
            ports.append(
                InstancePorts(
                    http=mine.http or keep(prev.http),
                    handshake=mine.handshake
                    or (keep(prev.handshake, group.tp) if "handshake" in needs else None),
                    notify=mine.notify
                    or (keep(prev.notify, group.tp) if "notify" in needs else None),
                    side_channel=mine.side_channel
                    or (keep(prev.side_channel) if "side_channel" in needs else None),
                )
            )
        groups.append(group.model_copy(update={"ports": ports}))
    proxy = spec.proxy.model_copy(
        update={
            "port": spec.proxy.port or keep(old.proxy),
            "registry_port": spec.proxy.registry_port or keep(old.registry),
        }
    )
    return spec.model_copy(update={"groups": groups, "proxy": proxy})
