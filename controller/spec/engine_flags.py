"""What a spec may put in an engine's argv: an allowlist per engine, never a denylist.

engine "vllm": the option strings of `vllm serve` as its own parser lists them
(controller/spec/vllm_serve_flags.txt, generated from vLLM 0.32.0 by
tests/fixtures/vllm/list_serve_flags.py), minus REFUSED: flags that load code (a class or
module by name, a plugin, a config file of more flags), that let API clients make the engine
read files or deserialize tensors, or that write files where the spec says. engine "sim": the
options `pdctl sim` declares (simulator/cli.py) minus its hidden test knobs, with the same
refusals. Flags pdctl renders itself (deployment.OWNED_FLAGS) are refused before this, in
deployment.check.

Tokens are read as vLLM's parser reads them: `_` in a long flag's name is `-`, a dotted
`--json-flag.key` sets `--json-flag`, an unambiguous prefix is its flag (argparse), `-O3` is
`--optimization-level 3`. Every token that starts with `-` (a negative number aside) must be an
allowed flag, and every other token a value of the flag before it: so no value can turn into a
flag, and a value that starts with `-` has to be attached (`--flag=-x`).

`--chat-template` stays allowed: vLLM renders chat templates in a sandboxed Jinja environment,
so a template (inline or a file) formats text and runs no code.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from controller.spec.deployment import OWNED_FLAGS

VLLM_VERSION = "0.32.0"
VLLM_FLAGS_FILE = Path(__file__).with_name("vllm_serve_flags.txt")

_CODE = "loads code by name"
_CLIENTS = "hands API clients"
# By argparse dest (so every spelling and its --no- twin): why a spec may not set it.
REFUSED: dict[str, str] = {
    "trust_remote_code": f"{_CODE} (the model repository's own Python)",
    "middleware": f"{_CODE} (ASGI middleware imported into the server)",
    "tool_parser_plugin": f"{_CODE} (a Python file imported as a tool parser)",
    "reasoning_parser_plugin": f"{_CODE} (a Python file imported as a reasoning parser)",
    "io_processor_plugin": f"{_CODE} (an IO processor plugin)",
    "logits_processors": f"{_CODE} (logits processor classes by qualified name)",
    "worker_cls": f"{_CODE} (the worker class by qualified name)",
    "worker_extension_cls": f"{_CODE} (a worker extension class by qualified name)",
    "scheduler_cls": f"{_CODE} (the scheduler class by qualified name)",
    "model_class_overrides": f"{_CODE} (model classes as module:class)",
    "compilation_config": f"{_CODE} (its backend is a qualified name)",
    "speculative_config": f"{_CODE} (its model may be a proposer's import path)",
    "ec_transfer_config": f"{_CODE} (ec_connector_module_path)",
    "ec_manager_config": f"{_CODE} (a manager class path)",
    "config": "reads more flags from a YAML file, out of the spec's sight",
    "log_config_file": f"{_CODE} (logging.config.dictConfig can build any class)",
    "logging_config": f"{_CODE} (logging.config.dictConfig can build any class)",
    "tool_server": "runs tool servers (the demo one executes Python)",
    "weight_transfer_config": "lets another process replace the model's weights",
    "allowed_local_media_path": f"{_CLIENTS} the host's files (file:// media)",
    "enable_prompt_embeds": f"{_CLIENTS} tensor deserialization (torch.load of embeds)",
    "enable_mm_embeds": f"{_CLIENTS} tensor deserialization (torch.load of embeds)",
    "trust_request_chat_template": f"{_CLIENTS} the chat template",
    "trust_request_mm_kwargs": f"{_CLIENTS} multimodal processor kwargs",
    "mm_encoder_fp8_scale_save_path": "writes a file where the spec says",
    "uds": "moves the engine off the TCP port pdctl gives it (--host, --port)",
}
# Flags whose value picks code by name: only these values.
ALLOWED_VALUES: dict[str, frozenset[str]] = {
    "distributed_executor_backend": frozenset({"mp", "ray", "uni", "external_launcher"}),
}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:\w+)?$")


@dataclass(frozen=True, slots=True)
class Flag:
    """One option string of an engine's parser: what it sets and how many values it takes
    ("0" for a switch, "1", or argparse's "?", "+", "*")."""

    option: str
    dest: str
    nargs: str


@dataclass(frozen=True, slots=True)
class ArgProblem:
    """One refused token: its index in the list and why."""

    index: int
    message: str
    overridable: bool = False  # a REFUSED flag, which unsafe_allow may let through


@cache
def vllm_flags() -> dict[str, Flag]:
    """`vllm serve`'s option strings (controller/spec/vllm_serve_flags.txt)."""
    flags = {}
    for line in VLLM_FLAGS_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            option, dest, nargs = line.split()
            flags[option] = Flag(option, dest, nargs)
    return flags


@cache
def sim_flags() -> dict[str, Flag]:
    """The options `pdctl sim` declares, plus the vLLM flags it accepts and ignores."""
    import typer.models

    from simulator import cli

    flags = {
        o: Flag(o, o.lstrip("-").replace("-", "_"), "1" if v else "0")
        for o, v in cli.IGNORED_VLLM_FLAGS.items()
    }
    for param in inspect.signature(cli.sim).parameters.values():
        info = param.default
        if not isinstance(info, typer.models.OptionInfo) or info.hidden:
            continue
        nargs = "0" if param.annotation in ("bool", bool) else "1"
        for decl in info.param_decls or ():
            for option in decl.split("/"):
                flags[option] = Flag(option, param.name, nargs)
    return flags


def engine_flags(engine: str) -> dict[str, Flag]:
    return sim_flags() if engine == "sim" else vllm_flags()


def allowed_options(engine: str, owned: frozenset[str]) -> list[str]:
    """Every option string a spec may give `engine`, for messages and docs."""
    return sorted(
        o for o, f in engine_flags(engine).items() if f.dest not in REFUSED and o not in owned
    )


def resolve(token: str, engine: str) -> tuple[Flag | None, str | None]:
    """The flag `token` sets as the engine's parser reads it, and its attached value."""
    flags = engine_flags(engine)
    name, eq, value = token.partition("=")
    attached = value if eq else None
    if engine == "sim":  # click: names exactly as declared
        return flags.get(name), attached
    if name.startswith("--"):
        name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
        if name in flags:
            return flags[name], attached
        matches = [f for o, f in flags.items() if o.startswith(name) and o.startswith("--")]
        return (matches[0] if len(matches) == 1 else None), attached
    if name.startswith("-O"):  # vLLM: -O3, -O=3, -O 3
        level = name[3:] if name[2:3] == "=" else name[2:]
        return flags.get("--optimization-level"), (level or attached)
    return flags.get(name), attached


def check_args(
    args: list[str], engine: str, *, unsafe: frozenset[str] = frozenset()
) -> list[ArgProblem]:
    """The tokens of one extra-args list the engine may not be given. `unsafe` holds the
    REFUSED flags an operator allowed for this deployment (the validation module decides)."""
    problems: list[ArgProblem] = []
    open_flag: Flag | None = None  # the flag the next value belongs to
    taken = 0  # values it has
    for k, token in enumerate(args):
        if not token.startswith("-") or _NEGATIVE_NUMBER.match(token):
            if open_flag is None or not _wants_more(open_flag, taken):
                problems.append(
                    ArgProblem(
                        k,
                        f"{token!r} is not a flag, nor the value of one: extra args are "
                        "flags, each followed by its value",
                    )
                )
                continue
            taken += 1
            problems += _check_value(open_flag, token, k)
            continue
        if open_flag is not None and _needs_value(open_flag, taken):
            problems.append(_missing_value(k - 1, open_flag))
        flag, attached = resolve(token, engine)
        # After a refused flag its values are not reported again.
        open_flag, taken = _ANY_VALUES, 0
        if flag is None:
            problems.append(ArgProblem(k, _unknown(token, engine)))
            continue
        if {flag.option, _canonical(flag)} & OWNED_FLAGS:
            problems.append(ArgProblem(k, f"{_shown(token)} is set by pdctl from the deployment"))
            continue
        if flag.dest in REFUSED and flag.option not in unsafe:
            problems.append(
                ArgProblem(k, f"{_shown(token)} {REFUSED[flag.dest]} and is refused", True)
            )
            continue
        open_flag = None
        if attached is not None:
            if flag.nargs == "0":
                problems.append(ArgProblem(k, f"{_shown(token)} is a switch and takes no value"))
            else:
                problems += _check_value(flag, attached, k)
            continue
        if flag.nargs != "0":
            open_flag = flag
    if open_flag is not None and _needs_value(open_flag, taken):
        problems.append(_missing_value(len(args) - 1, open_flag))
    return problems


_ANY_VALUES = Flag("", "", "*")


def used_flags(args: list[str], engine: str) -> set[str]:
    """The canonical option (and the option) of every flag token in `args`."""
    used = set()
    for token in args:
        if token.startswith("-") and not _NEGATIVE_NUMBER.match(token):
            flag, _ = resolve(token, engine)
            if flag is not None:
                used |= {flag.option, _canonical(flag)}
    return used


def _canonical(flag: Flag) -> str:
    """The long form of `flag` (`-tp` is `--tensor-parallel-size`)."""
    return "--" + flag.dest.replace("_", "-")


def _check_value(flag: Flag, value: str, index: int) -> list[ArgProblem]:
    if "module_path" in value:
        return [ArgProblem(index, "a *_module_path loads arbitrary code and is refused")]
    allowed = ALLOWED_VALUES.get(flag.dest)
    if allowed is not None and value not in allowed:
        return [
            ArgProblem(
                index,
                f"{flag.option} takes one of {', '.join(sorted(allowed))} "
                "(any other value is a class imported by name)",
            )
        ]
    if flag.dest == "spec_model" and _IMPORT_PATH.match(value):
        return [ArgProblem(index, f"{flag.option} {value!r} reads as an import path (code)")]
    return []


def _wants_more(flag: Flag, taken: int) -> bool:
    return flag.nargs in ("+", "*") or (flag.nargs in ("1", "?") and taken == 0)


def _needs_value(flag: Flag, taken: int) -> bool:
    return taken == 0 and flag.nargs in ("1", "+")


def _missing_value(index: int, flag: Flag) -> ArgProblem:
    return ArgProblem(
        index,
        f"{flag.option} needs a value; one that starts with '-' goes after "
        f"'=' ({flag.option}=VALUE)",
    )


def _unknown(token: str, engine: str) -> str:
    name = _shown(token)
    if engine == "sim":
        return (
            f"{name} is not a flag of the stand-in (pdctl sim); it takes "
            f"{', '.join(allowed_options('sim', OWNED_FLAGS))}"
        )
    return (
        f"{name} is not a flag of vllm serve {VLLM_VERSION} that a spec may give "
        "(names are case-sensitive; an abbreviation must be unambiguous; "
        "the list: controller/spec/vllm_serve_flags.txt)"
    )


def _shown(token: str) -> str:
    return token.split("=", 1)[0]
