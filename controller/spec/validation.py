"""The deployment checks that need the world: other deployments' ports, busy host ports, the
stand-in's profiles and the operator's settings. `validate` adds them to rules.check.

Engine argv and env go through allowlists (controller/spec/engine_flags.py, engine_env.py), which
read each entry by what it does: paths only under the operator's roots and listeners only on the
instance's bound address (`EngineReach`, from the settings engine_path_roots and the launch's
bind address), as are the paths a connector's extra config names. What they refuse as code runs
only with an override a demanding reviewer can follow: the spec names each
env name and flag in `unsafe_allow` with a reason (so it is stored in the revision, shown in
its diff and attributed to the operator who saved it), and the host's own operator, who runs
`pdctl serve`, has turned overrides on with the setting allow_code_env (PDCTL_ALLOW_CODE_ENV).
Neither alone is enough: an API token cannot grant itself code on the host, and the host
setting lets through only what a spec names. Entries a spec does not use are refused, so an
override never outlives what it was for. Flags pdctl renders stay refused regardless.

Pure apart from `host_port_busy`, the one I/O seam, which callers pass in as `is_busy`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.spec import engine_env, engine_flags
from controller.spec.deployment import DeploymentSpec, Engine, UnsafeAllow
from controller.spec.field_error import FieldError
from controller.spec.rules import check
from controller.spec.surface.reach import EngineReach
from controller.spec.surface.values import object_problems
from domain import profiles
from domain.errors import Problem

OVERRIDE_HINT = (
    "an operator can allow it for this deployment in unsafe_allow.{field} (with a reason) on "
    "a host whose operator setting allow_code_env is on (PDCTL_ALLOW_CODE_ENV)"
)


def validate(
    spec: DeploymentSpec,
    *,
    claimed_by_others: Mapping[int, str],
    is_busy: Callable[[int], bool],
    allow_code_env: bool,
    own_ports: Iterable[int] = (),
    reach: EngineReach | None = None,
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
    problems += engine_problems(spec, overrides_on=allow_code_env, reach=reach)
    return problems


def engine_problems(
    spec: DeploymentSpec, *, overrides_on: bool, reach: EngineReach | None = None
) -> list[Problem]:
    """What the engine allowlists refuse in the spec's env, extra args and connector
    settings, and any unsafe_allow that is off on this host or names what the spec does not
    use. `reach`: the operator's roots and the bound address (default: none, loopback)."""
    reach = reach or EngineReach()
    unsafe = spec.unsafe_allow
    problems = []
    if unsafe is not None and not overrides_on:
        problems.append(
            Problem(
                ("unsafe_allow",),
                "this host takes no overrides of the engine allowlists: its operator setting "
                "allow_code_env is off (PDCTL_ALLOW_CODE_ENV)",
                "unsafe_allow_off",
            )
        )
    honoured = unsafe if overrides_on else None
    problems += _env_problems(spec, set(honoured.env) if honoured else set(), reach)
    flags = _unsafe_flags(spec, honoured) if honoured else frozenset()
    problems += _arg_problems(spec, flags, reach)
    problems += _connector_problems(spec, reach)
    if honoured is not None:
        problems += _unused_overrides(spec, honoured)
    return problems


def engine_envs(spec: DeploymentSpec) -> list[tuple[tuple, dict[str, str]]]:
    """Each env of the spec with where it is."""
    return [(("env",), spec.env)] + [
        (("groups", i, "env"), g.env) for i, g in enumerate(spec.groups)
    ]


def engine_arg_lists(spec: DeploymentSpec) -> list[tuple[tuple, list[str]]]:
    """Each extra-args list of the spec with where it is."""
    return [(("extra_args",), spec.extra_args)] + [
        (("groups", i, "extra_args"), g.extra_args) for i, g in enumerate(spec.groups)
    ]


def connector_extras(spec: DeploymentSpec) -> list[tuple[tuple, dict[str, Any]]]:
    """Each connector extra config of the spec (KV, per group, EC) with where it is."""
    extras: list[tuple[tuple, dict[str, Any]]] = [
        (("kv_connector_extra_config",), dict(spec.kv_connector_extra_config))
    ]
    extras += [
        (("groups", i, "kv_connector_extra_config"), dict(g.kv_connector_extra_config))
        for i, g in enumerate(spec.groups)
    ]
    if spec.ec_transfer is not None:
        extras.append(
            (
                ("ec_transfer", "ec_connector_extra_config"),
                dict(spec.ec_transfer.ec_connector_extra_config),
            )
        )
    return extras


def _connector_problems(spec: DeploymentSpec, reach: EngineReach) -> list[Problem]:
    """A connector's setting that names a path (ExampleConnector's shared_storage_path, where
    it writes and reads KV) is held to the operator's roots, as the engine's own paths are."""
    problems = []
    for loc, extra in connector_extras(spec):
        for key, value in extra.items():
            for msg in object_problems({key: value}, reach):
                problems.append(Problem((*loc, key), msg, "connector_not_allowed"))
    return problems


def _env_problems(spec: DeploymentSpec, allowed: set[str], reach: EngineReach) -> list[Problem]:
    problems = []
    for loc, env in engine_envs(spec):
        for name, value in env.items():
            why = engine_env.check(name, value, reach)
            if why is not None and name not in allowed:
                hint = OVERRIDE_HINT.format(field="env")
                problems.append(Problem((*loc, name), f"{why}; {hint}", "env_not_allowed"))
    return problems


def _arg_problems(
    spec: DeploymentSpec, allowed: frozenset[str], reach: EngineReach
) -> list[Problem]:
    problems = []
    for loc, args in engine_arg_lists(spec):
        for p in engine_flags.check_args(args, spec.engine.value, unsafe=allowed, reach=reach):
            msg = (
                f"{p.message}; {OVERRIDE_HINT.format(field='args')}" if p.overridable else p.message
            )
            problems.append(Problem((*loc, p.index), msg, "arg_not_allowed"))
    return problems


def _unsafe_flags(spec: DeploymentSpec, unsafe: UnsafeAllow) -> frozenset[str]:
    """The options unsafe_allow.args names, as the engine reads them."""
    flags = (engine_flags.resolve(a, spec.engine.value)[0] for a in unsafe.args)
    return frozenset(f.option for f in flags if f is not None)


def _unused_overrides(spec: DeploymentSpec, unsafe: UnsafeAllow) -> list[Problem]:
    problems = []
    set_names = {name for _, env in engine_envs(spec) for name in env}
    for k, name in enumerate(unsafe.env):
        if name not in set_names:
            problems.append(
                Problem(
                    ("unsafe_allow", "env", k),
                    f"{name} is in no env of this spec: an override names only what it uses",
                    "unsafe_allow_unused",
                )
            )
    engine = spec.engine.value
    used = set()
    for _, args in engine_arg_lists(spec):
        used |= engine_flags.used_flags(args, engine)
    for k, flag in enumerate(unsafe.args):
        resolved, _ = engine_flags.resolve(flag, engine)
        if resolved is None:
            msg = f"{flag} is not a flag of the {engine} engine"
        elif resolved.option not in used:
            msg = f"{flag} is in no extra args of this spec: an override names only what it uses"
        else:
            continue
        problems.append(Problem(("unsafe_allow", "args", k), msg, "unsafe_allow_unused"))
    return problems


def given_ports(spec: DeploymentSpec) -> list[tuple[tuple, int, int, str]]:
    """(loc, base port, width, what) for every port the spec gives explicitly."""
    out: list[tuple[tuple, int | None, int, str]] = [
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
