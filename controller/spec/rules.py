"""The rules that relate a deployment spec's fields to each other: connector and topology,
groups and roles, GPUs, ports, extra args, and each section's own rules, each error a
FieldError at the field it is about. Pure: the spec in, the first broken rule out."""

from __future__ import annotations

from controller.spec.attach import check_attached
from controller.spec.deployment import (
    ENCODE,
    OWNED_FLAGS,
    DeploymentSpec,
    Topology,
    who_has,
)
from controller.spec.field_error import FieldError
from controller.spec.placement import check_placement
from controller.spec.sections.autopilot import check_autopilot
from controller.spec.sections.bidir import check_bidirectional
from controller.spec.sections.encode import check_encode
from controller.spec.sections.kv_extra import check_keys
from controller.spec.sections.render_tier import check_render_tier
from controller.spec.sections.role_switch import check_role_switch
from domain.kv_connectors import names
from domain.modes import Mode, Role


def check(spec: DeploymentSpec) -> None:
    """The rules that relate fields to each other; raises FieldError at the first broken one."""
    check_attached(spec)  # first: an attached spec names addresses, nothing to launch
    check_bidirectional(spec)  # then: a colocated spec asking for it hears about the key
    check_encode(spec)  # before the KV rules: an encode group hears why it has no KV
    check_render_tier(spec)  # before the groups: a render group is none of theirs
    _check_connector(spec)
    _check_groups(spec)
    _check_gpus(spec)
    check_placement(spec)
    _check_ports(spec)
    _check_extra_args(spec)
    check_role_switch(spec)
    check_autopilot(spec)


def _check_connector(spec: DeploymentSpec) -> None:
    if spec.topology is Topology.DISAGGREGATED:
        if spec.connector is None:
            raise FieldError(("connector",), "a disaggregated deployment needs a KV connector")
        if spec.kv_backend is None:
            raise FieldError(
                ("connector",),
                f"unknown connector {spec.connector!r}; known: {', '.join(names())}",
            )
    elif spec.connector is not None:
        raise FieldError(
            ("connector",), "a colocated deployment moves no KV: leave connector unset"
        )
    if spec.kv_connector_extra_config and spec.connector is None:
        raise FieldError(
            ("kv_connector_extra_config",),
            "a colocated deployment has no KV connector to configure",
        )
    kv = spec.kv_backend
    owned = kv.owned_extra_keys if kv is not None else frozenset()
    check_keys(("kv_connector_extra_config",), spec.kv_connector_extra_config, owned)
    for i, group in enumerate(spec.groups):
        where = ("groups", i, "kv_connector_extra_config")
        if group.kv_connector_extra_config and (
            spec.connector is None or group.role == Role.COLOCATED
        ):
            raise FieldError(where, "a colocated group moves no KV: it has no connector to set")
        check_keys(where, group.kv_connector_extra_config, owned)
    off = kv.prefix_caching_off if kv is not None else None
    if off and spec.prefix_caching and not spec.prefix_caching_override_reason:
        raise FieldError(
            ("prefix_caching",),
            f"{spec.connector} runs with prefix caching off ({off}); set "
            "prefix_caching false, or give prefix_caching_override_reason",
        )


def _check_groups(spec: DeploymentSpec) -> None:
    group_names = [g.name for g in spec.groups]
    modes = spec.kv_backend is not None and spec.kv_backend.has_modes
    for i, group in enumerate(spec.groups):
        if group_names.count(group.name) > 1:
            raise FieldError(("groups", i, "name"), f"group name {group.name!r} is used twice")
        if group.role is Role.RENDER:  # checked by controller/spec/sections/render_tier.py
            continue
        if spec.topology is Topology.COLOCATED and group.role not in (Role.COLOCATED, ENCODE):
            raise FieldError(
                ("groups", i, "role"), "a colocated deployment has only colocated groups"
            )
        if spec.topology is Topology.DISAGGREGATED and group.role is Role.COLOCATED:
            raise FieldError(
                ("groups", i, "role"), "a disaggregated deployment has prefill and decode groups"
            )
        if group.mode is Mode.COLOCATED:
            raise FieldError(
                ("groups", i, "mode"),
                "a group's mode is read or write; a colocated group has none",
            )
        if group.mode is not None and not modes:
            raise FieldError(
                ("groups", i, "mode"),
                f"{spec.connector or 'no connector'} has "
                f"no read/write modes (only {who_has('has_modes')} does)",
            )
        if modes and group.mode is None and group.role is not ENCODE:
            raise FieldError(
                ("groups", i, "mode"), f"{spec.connector} groups need a mode: read or write"
            )
        if group.ports and len(group.ports) != group.count:
            raise FieldError(
                ("groups", i, "ports"), f"give ports for all {group.count} instances or for none"
            )
    if spec.topology is Topology.DISAGGREGATED:
        if {g.role for g in spec.groups} - {ENCODE, Role.RENDER} != {Role.PREFILL, Role.DECODE}:
            raise FieldError(
                ("groups",),
                "a disaggregated deployment needs at least one prefill group and one decode group",
            )
        if modes:
            for mode in {g.mode for g in spec.groups if g.role not in (ENCODE, Role.RENDER)}:
                if {g.role for g in spec.groups if g.mode == mode} != {Role.PREFILL, Role.DECODE}:
                    raise FieldError(
                        ("groups",),
                        f"mode {mode} has no prefill/decode pair: "
                        "a prefill and its decode must run the same mode",
                    )


def _check_gpus(spec: DeploymentSpec) -> None:
    owner: dict[int, str] = {}
    for i, group in enumerate(spec.groups):
        needs_gpus = bool(group.gpus)  # none given: the stand-in, or vLLM on CPU
        if needs_gpus and len(group.gpus) != group.count * group.tp:
            raise FieldError(
                ("groups", i, "gpus"),
                f"{group.count} instance(s) x TP "
                f"{group.tp} need {group.count * group.tp} GPU ids, got "
                f"{len(group.gpus)}",
            )
        for j, gpu in enumerate(group.gpus):
            instance = f"{group.name}-{j // group.tp}"
            if gpu in owner:
                raise FieldError(
                    ("groups", i, "gpus"), f"GPU {gpu} is given to both {owner[gpu]} and {instance}"
                )
            owner[gpu] = instance


def _check_ports(spec: DeploymentSpec) -> None:
    used: dict[int, str] = {}

    def claim(port: int | None, width: int, what: str, loc: tuple) -> None:
        if port is None:
            return
        for p in range(port, port + width):
            if p in used:
                raise FieldError(loc, f"port {p} ({what}) is also {used[p]}")
            used[p] = what

    claim(spec.proxy.port, 1, "the proxy's HTTP port", ("proxy", "port"))
    claim(spec.proxy.registry_port, 1, "the proxy's registry port", ("proxy", "registry_port"))
    for i, group in enumerate(spec.groups):
        for j, ports in enumerate(group.ports):
            where = f"{group.name}-{j}"
            base = ("groups", i, "ports", j)
            claim(ports.http, 1, f"{where} HTTP", (*base, "http"))
            # MoRIIO bases: each TP rank adds its offset, so tp ports from each base.
            claim(ports.handshake, group.tp, f"{where} handshake", (*base, "handshake"))
            claim(ports.notify, group.tp, f"{where} notify", (*base, "notify"))
            claim(ports.side_channel, 1, f"{where} NIXL side channel", (*base, "side_channel"))


def _check_extra_args(spec: DeploymentSpec) -> None:
    lists: list[tuple[tuple[str | int, ...], list[str]]] = [(("extra_args",), spec.extra_args)]
    lists += [(("groups", i, "extra_args"), g.extra_args) for i, g in enumerate(spec.groups)]
    for loc, args in lists:
        for k, arg in enumerate(args):
            flag = arg.split("=", 1)[0]
            if owned := _owned_flag(flag):
                means = f" (vLLM reads it as {owned})" if owned != flag else ""
                raise FieldError(
                    (*loc, k),
                    f"{flag} is set by pdctl from the deployment{means}; change the field instead",
                )
            if shell := next((s for s in SHELL_SYNTAX if s in arg), None):
                raise FieldError(
                    (*loc, k),
                    f"extra args go to the engine as they are, never "
                    f"through a shell: shell syntax ({shell!r}) is refused",
                )
            if "kv_connector_module_path" in arg:
                raise FieldError(
                    (*loc, k), "kv_connector_module_path loads arbitrary code and is refused"
                )
            if any(c in arg for c in "\n\r\x00"):
                raise FieldError((*loc, k), "extra args may not contain newlines or NUL")


# Shell command syntax: no engine flag needs it, so it only shows someone expecting a shell
# (argv never goes through one; an inline chat template with these needs a file instead).
SHELL_SYNTAX = (";", "|", "&&", "`", "$(", "${")


def _owned_flag(flag: str) -> str | None:
    """The owned flag `flag` would set: vLLM's parser reads `_` as `-` and, like argparse,
    takes an unambiguous prefix (`--por` is `--port`); `-tp2` is `-tp 2`."""
    flag = flag.strip()
    if flag.startswith("--"):  # `--json-flag.key` sets --json-flag
        flag = "--" + flag[2:].split(".", 1)[0].replace("_", "-")
        if len(flag) > 2:
            return next((o for o in sorted(OWNED_FLAGS) if o.startswith(flag)), None)
        return None
    return next(
        (o for o in sorted(OWNED_FLAGS) if not o.startswith("--") and flag.startswith(o)), None
    )
