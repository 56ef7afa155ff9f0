"""Why pdctl refuses a lifecycle verb on an attached deployment, and what its operator would
run instead: the `vllm serve` flags that would change, rendered by the same launch renderer
that starts pdctl's own engines (controller/launch/render.py), at the instances' addresses.

Pure: specs in, a 409 out.
"""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlsplit

from controller.launch.process import LaunchSettings
from controller.launch.render import engine_flags
from controller.spec.deployment import DeploymentSpec, Engine, InstancePorts
from domain.errors import Conflict

# What pdctl would have done, for "so it does not ..."
VERB_DOES = {
    "start": "start it",
    "stop": "stop it",
    "restart": "restart it",
    "switch": "switch its mode",
    "apply": "roll this change out",
    "proposal": "apply this advisor proposal",
}
VERB_TEXT = {
    "start": "start its engines where they run",
    "stop": "stop its engines where they run",
    "restart": "restart its engines where they run",
    "switch": "restart each engine with the flags below",
    "apply": "restart each engine with the flags below",
    "proposal": "restart each engine with the flags below",
}


class AttachedRefused(Conflict):
    """A verb that needs the processes' lifecycle, asked of a deployment pdctl only watches."""

    title = "Deployment is attached"

    def __init__(self, message: str, commands: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.commands = commands  # instance -> the flags that would change (or its argv)


def served_flags(spec: DeploymentSpec) -> dict[str, list[str]]:
    """Each attached instance's `vllm serve` flags as pdctl would render them, at its URL."""
    as_vllm = spec.model_copy(update={"engine": Engine.VLLM})
    return {
        f"{group.name}-{i}": _flags_at(as_vllm, group, url)
        for group in spec.groups
        for i, url in enumerate(group.urls)
    }


def flags_as(spec: DeploymentSpec, role: str, url: str) -> list[str]:
    """The `vllm serve` flags of an instance at `url` serving `role`, as pdctl renders the
    deployment's first group of that role (what a restart in that role would run)."""
    as_vllm = spec.model_copy(update={"engine": Engine.VLLM, "role_switch": None})
    group = next(g for g in spec.groups if g.role.value == role)
    return _flags_at(as_vllm, group, url)


def _flags_at(spec: DeploymentSpec, group: Any, url: str) -> list[str]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    settings = LaunchSettings(host=parts.hostname or "127.0.0.1")
    return engine_flags(spec, group, InstancePorts(http=port), 0, settings)


def attached_preview(spec: DeploymentSpec) -> dict[str, dict[str, Any]]:
    """The commands page of an attached deployment: the `vllm serve` line each instance would
    run as pdctl renders it at its address (what the operator compares with what runs);
    pdctl runs none of them."""
    out = {}
    for name, flags in served_flags(spec).items():
        argv = ["vllm", "serve", spec.model, *flags]
        command = shlex.join(argv)
        out[name] = {"argv": argv, "env": {}, "command": command, "command_line": command}
    return out


def changed_flags(old: list[str], new: list[str]) -> list[str]:
    """The flags of `new` that differ from `old` (`--no-X` for a switch turned off), and
    `(drop --flag)` for one `new` no longer gives."""
    before, after = _options(old), _options(new)
    out = []
    for flag, value in after.items():
        if before.get(flag, "\0") != value:
            out.append(flag if value is None else f"{flag} {value}")
    out += [f"(drop {flag})" for flag in before if flag not in after]
    return out


def attach_refusal(
    name: str, verb: str, spec: DeploymentSpec, target: DeploymentSpec | None = None
) -> AttachedRefused:
    """The 409 for `verb` on attached `name`: with a `target` spec (an apply, a switch, a
    proposal), the flags that would change on each instance; else each instance's command."""
    does, todo = VERB_DOES.get(verb, verb), VERB_TEXT.get(verb, verb)
    now = served_flags(spec)
    if target is not None:
        then = served_flags(target.model_copy(update={"engine": Engine.EXTERNAL}))
        commands = {
            inst: changed
            for inst, flags in then.items()
            if (changed := changed_flags(now.get(inst, []), flags))
        }
        if not commands:
            return AttachedRefused(
                f"deployment {name!r} is attached: pdctl does not own its processes, so it "
                f"does not {does}; this change renders no different `vllm serve` flags: "
                "store it with rollout=false",
                {},
            )
        lines = "; ".join(f"{inst}: {' '.join(f)}" for inst, f in commands.items())
        return AttachedRefused(
            f"deployment {name!r} is attached: pdctl does not own its processes, so it does "
            f"not {does}. To make this change, {todo}: {lines}",
            commands,
        )
    commands = {inst: ["vllm", "serve", spec.model, *flags] for inst, flags in now.items()}
    first = next(iter(commands.items()), None)
    example = f" (e.g. {first[0]}: {' '.join(first[1])})" if first else ""
    return AttachedRefused(
        f"deployment {name!r} is attached: pdctl does not own its processes, so it does not "
        f"{does}. {todo.capitalize()}{example}",
        commands,
    )


def _options(flags: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i = 0
    while i < len(flags):
        flag = flags[i]
        value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("-") else None
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
        else:
            i += value is not None
        out[flag] = value
        i += 1
    return out
