"""The deployment checks that need the world: other deployments' ports, busy host ports, the
stand-in's profiles and the operator's settings. `validate` adds them to deployment.check.

Pure apart from `host_port_busy`, the one I/O seam, which callers pass in as `is_busy`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from controller.deployment import DeploymentSpec, Engine, FieldError, check, code_env_names
from simulator import profiles


@dataclass(frozen=True, slots=True)
class Problem:
    """One broken rule, shaped like an item of FastAPI's 422 detail (loc without "body")."""

    loc: tuple
    msg: str
    type: str = "value_error"


def validate(
    spec: DeploymentSpec,
    *,
    claimed_by_others: Mapping[int, str],
    is_busy: Callable[[int], bool],
    allow_code_env: bool,
    own_ports: Iterable[int] = (),
) -> list[Problem]:
    """Every problem with `spec`; empty when it may be stored.

    `claimed_by_others` maps each port another deployment's current revision claims to that
    deployment's name; `own_ports` are this deployment's ports in its current revision, which
    its own running instances may hold on the host.
    """
    try:
        check(spec)
    except FieldError as err:
        return [Problem(err.loc, err.message)]
    problems = _ports(spec, claimed_by_others, is_busy, set(own_ports))
    problems += _profiles(spec)
    if not allow_code_env:
        problems += [
            Problem(
                loc,
                f"{name} changes what code the engine runs and is refused "
                "unless the operator setting allow_code_env is true "
                "(PDCTL_ALLOW_CODE_ENV)",
                "code_env",
            )
            for loc, name in code_env_names(spec)
        ]
    return problems


def given_ports(spec: DeploymentSpec) -> list[tuple[tuple, int, int, str]]:
    """(loc, base port, width, what) for every port the spec gives explicitly."""
    out = [
        (("proxy", "port"), spec.proxy.port, 1, "the proxy's HTTP port"),
        (("proxy", "registry_port"), spec.proxy.registry_port, 1, "the proxy's registry port"),
    ]
    for i, group in enumerate(spec.groups):
        for j, p in enumerate(group.ports):
            base = ("groups", i, "ports", j)
            out += [
                ((*base, "http"), p.http, 1, "HTTP"),
                ((*base, "handshake"), p.handshake, group.tp, "handshake"),
                ((*base, "notify"), p.notify, group.tp, "notify"),
                ((*base, "side_channel"), p.side_channel, 1, "NIXL side channel"),
            ]
    return [(loc, port, width, what) for loc, port, width, what in out if port is not None]


def _ports(
    spec: DeploymentSpec, others: Mapping[int, str], is_busy: Callable[[int], bool], own: set[int]
) -> list[Problem]:
    problems = []
    for loc, base, width, what in given_ports(spec):
        span = range(base, base + width)
        ranks = f" (ranks use {base}-{base + width - 1})" if width > 1 else ""
        clash = next((p for p in span if p in others), None)
        if clash is not None:
            problems.append(
                Problem(
                    loc,
                    f"port {clash} ({what}{ranks}) is claimed by deployment {others[clash]!r}",
                    "port_conflict",
                )
            )
            continue
        busy = next((p for p in span if p not in own and is_busy(p)), None)
        if busy is not None:
            problems.append(
                Problem(loc, f"port {busy} ({what}{ranks}) is in use on this host", "port_busy")
            )
    return problems


def _profiles(spec: DeploymentSpec) -> list[Problem]:
    if spec.engine is not Engine.SIM:
        return []
    problems = []
    models = available_models()
    if spec.model not in models:
        known = ", ".join(sorted(models))
        problems.append(
            Problem(
                ("model",),
                f"the stand-in has no model profile {spec.model!r}; known (name or hf_id): {known}",
                "unknown_profile",
            )
        )
    hardware = profiles.available("hardware")
    if spec.hardware is not None and spec.hardware not in hardware:
        problems.append(
            Problem(
                ("hardware",),
                f"the stand-in has no hardware profile "
                f"{spec.hardware!r}; known: {', '.join(hardware)}",
                "unknown_profile",
            )
        )
    return problems


def available_models() -> dict[str, str]:
    """Every name a stand-in model may be given by, profile name or hf_id, to its profile."""
    names = {}
    for name in profiles.available("models"):
        names[name] = name
        names[profiles.model(name).hf_id] = name
    return names


def host_port_busy(port: int, hosts: Iterable[str] = ("127.0.0.1",)) -> bool:
    """True when a listening socket could not bind `port` on one of `hosts` right now."""
    for host in dict.fromkeys(hosts):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # As servers do: a port in TIME_WAIT is free for a new listener.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                return True
    return False
