"""What a spec may put in an engine's argv: the flags of the engine's own parser, each by what
it does (a table per engine: controller/spec/surface/vllm_flags.txt, sim_flags.txt), never a
denylist.

engine "vllm": the option strings of `vllm serve` as its own parser lists them
(controller/spec/vllm_serve_flags.txt, generated from vLLM 0.32.0 by
tests/fixtures/vllm/list_serve_flags.py). engine "sim": the options `pdctl sim` declares
(simulator/cli.py) minus its hidden test knobs. Every dest of either has a kind in its table
(tests/controller/spec/surface/test_tables.py): a setting, a host path (only under the
operator's roots), a listener (only the instance's bound address), or what a spec never
gives: code (a class, module, plugin or code-bearing file), a remote server, a flag that hands
API clients the host, or one pdctl sets. Values are read by their form: a JSON config key by
key (a key naming code, a path or the network), a chat template inline or as a file, a model
as a Hugging Face id or a directory, LoRA adapters, KV-event endpoints. Flags pdctl renders
itself (deployment.OWNED_FLAGS) are refused before this, in rules.check.

Tokens are read as vLLM's parser reads them: `_` in a long flag's name is `-`, a dotted
`--json-flag.key` sets one key of `--json-flag`, an unambiguous prefix is its flag (argparse),
`-O3` is `--optimization-level 3`. Every token that starts with `-` (a negative number aside)
must be an allowed flag, and every other token a value of the flag before it: so no value can
turn into a flag, and a value that starts with `-` has to be attached (`--flag=-x`).
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from controller.spec.deployment import OWNED_FLAGS
from controller.spec.surface import values
from controller.spec.surface.kinds import NEVER, Entry, Kind, flag_table
from controller.spec.surface.reach import EngineReach

VLLM_VERSION = "0.32.0"
VLLM_FLAGS_FILE = Path(__file__).with_name("vllm_serve_flags.txt")

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def refused(engine: str) -> dict[str, str]:
    """By dest: the flags a spec never gives `engine` (code, remote, refused), and why."""
    return {d: e.reason() for d, e in flag_table(engine).items() if e.kind in NEVER}


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
    overridable: bool = False  # a refused flag, which unsafe_allow may let through


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
    never = refused(engine)
    return sorted(
        o for o, f in engine_flags(engine).items() if f.dest not in never and o not in owned
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


@dataclass(frozen=True, slots=True)
class _Given:
    """A flag as one token gave it: its table entry, the JSON key a dotted spelling sets,
    and whether an override lets it through unread."""

    flag: Flag
    entry: Entry
    key: str | None
    trusted: bool


def check_args(
    args: list[str],
    engine: str,
    *,
    unsafe: frozenset[str] = frozenset(),
    reach: EngineReach | None = None,
) -> list[ArgProblem]:
    """The tokens of one extra-args list the engine may not be given. `unsafe` holds the
    refused flags an operator allowed for this deployment (the validation module decides);
    `reach` where paths and listeners may point (none by default)."""
    reach = reach or EngineReach()
    problems: list[ArgProblem] = []
    open_flag: Flag | None = None  # the flag the next value belongs to
    given: _Given | None = None  # how to read its values (None: already refused)
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
            problems += _check_value(given, token, k, reach)
            continue
        if open_flag is not None and _needs_value(open_flag, taken):
            problems.append(_missing_value(k - 1, open_flag))
        flag, attached = resolve(token, engine)
        # After a refused flag its values are not reported again.
        open_flag, given, taken = _ANY_VALUES, None, 0
        if flag is None:
            problems.append(ArgProblem(k, _unknown(token, engine)))
            continue
        if {flag.option, _canonical(flag)} & OWNED_FLAGS:
            problems.append(ArgProblem(k, f"{_shown(token)} is set by pdctl from the deployment"))
            continue
        entry = flag_table(engine).get(flag.dest)
        if entry is None:  # the tables cover every flag (tests); refuse rather than guess
            problems.append(ArgProblem(k, f"{_shown(token)} has no kind in the flag table"))
            continue
        trusted = flag.option in unsafe
        if refusal := _refusal(_shown(token), entry, trusted):
            problems.append(ArgProblem(k, *refusal))
            continue
        given = _Given(flag, entry, dotted_key(token), trusted)
        open_flag = None
        if attached is not None:
            if flag.nargs == "0":
                problems.append(ArgProblem(k, f"{_shown(token)} is a switch and takes no value"))
            else:
                problems += _check_value(given, attached, k, reach)
            continue
        if flag.nargs != "0":
            open_flag = flag
    if open_flag is not None and _needs_value(open_flag, taken):
        problems.append(_missing_value(len(args) - 1, open_flag))
    return problems


def dotted_key(token: str) -> str | None:
    """The JSON key `--json-flag.key[=...]` sets; None for any other spelling."""
    name = token.partition("=")[0]
    if not name.startswith("--") or "." not in name:
        return None
    return name.split(".", 1)[1]


def _refusal(shown: str, entry: Entry, trusted: bool) -> tuple[str, bool] | None:
    """Why a flag is refused whatever its value, and whether an override may let it through."""
    if entry.kind is Kind.OWNED:
        return f"{shown} is set by pdctl from the deployment", False
    if entry.kind in NEVER and not trusted:
        return f"{shown} {entry.refusal()}; it is refused", True
    return None


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


def _check_value(
    given: _Given | None, value: str, index: int, reach: EngineReach
) -> list[ArgProblem]:
    """What is wrong with one value of `given`, read by its entry's kind and form."""
    if given is None or given.trusted:
        return []
    entry, option = given.entry, given.flag.option
    if given.key is not None:
        if entry.form != "json":
            return [ArgProblem(index, f"give {option} as one value, so all of it is read")]
        found = values.key_problems(given.key, _json_or_text(value), reach)
    else:
        found = values.problems(entry, value, reach)
    return [ArgProblem(index, f"{option}: {p}") for p in found]


def _json_or_text(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        return value


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
