"""The tables of what an engine's env names and flags do (env.txt, vllm_flags.txt,
sim_flags.txt): one entry per name, each with its kind, read once.

A line is `NAME KIND [form=F] [values=A,B] [code=A,B] [-- why]`; `#` starts a comment line.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path

HERE = Path(__file__).parent


class Kind(Enum):
    """What an entry does, which decides what a spec may give it."""

    VALUE = "value"  # a setting
    PATH = "path"  # a host path the engine reads or writes: under the operator's roots
    LISTENER = "listener"  # an address the engine listens on: the instance's bound address
    CODE = "code"  # names a program, module, library, plugin or code-bearing file
    REMOTE = "remote"  # a server elsewhere the engine downloads from or reports to
    REFUSED = "refused"  # anything else a spec may not give (the entry says why)
    OWNED = "owned"  # set by pdctl from the deployment


# Refused kinds; an audited override (unsafe_allow) may let an entry of these through.
NEVER = frozenset({Kind.CODE, Kind.REMOTE, Kind.REFUSED})
_SAID = {
    Kind.CODE: "code",
    Kind.REMOTE: "a server elsewhere",
    Kind.REFUSED: "refused",
    Kind.OWNED: "set by pdctl",
}
_DEFAULT_WHY = {
    Kind.CODE: "names a program, module, library, plugin or code-bearing file the engine loads",
    Kind.REMOTE: "points the engine at a server elsewhere",
    Kind.OWNED: "is set by pdctl from the deployment",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One name of a table: its kind, how to read its value, and why it is what it is."""

    name: str
    kind: Kind
    form: str | None = None  # how a value is read (flags: json, template, model, ...)
    values: frozenset[str] | None = None  # when set: the only values it takes
    code_values: frozenset[str] = frozenset()  # values that load code
    why: str = ""

    def reason(self) -> str:
        return self.why or _DEFAULT_WHY.get(self.kind, "")

    def refusal(self) -> str:
        """What the entry is and why, after its name: "is code: a program UCX runs ..."."""
        return f"is {_SAID[self.kind]}: {self.reason()}"


def parse(text: str) -> dict[str, Entry]:
    """The entries of a table's text, by name; a malformed line raises ValueError."""
    entries: dict[str, Entry] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line, _, why = raw.partition(" -- ")
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) < 2 or words[0] in entries:
            raise ValueError(f"line {number}: {raw!r} (NAME KIND, each name once)")
        options = dict(w.split("=", 1) for w in words[2:])
        entries[words[0]] = Entry(
            words[0],
            Kind(words[1]),
            form=options.get("form"),
            values=frozenset(options["values"].split(",")) if "values" in options else None,
            code_values=frozenset(options.get("code", "").split(",")) - {""},
            why=why.strip(),
        )
    return entries


@cache
def table(name: str) -> dict[str, Entry]:
    """A table of this package by file name (env.txt, vllm_flags.txt, sim_flags.txt)."""
    return parse((HERE / name).read_text())


def env_table() -> dict[str, Entry]:
    return table("env.txt")


def flag_table(engine: str) -> dict[str, Entry]:
    """By dest: the stand-in's own table over vLLM's (it ignores some of vLLM's flags)."""
    if engine == "sim":
        return {**table("vllm_flags.txt"), **table("sim_flags.txt")}
    return table("vllm_flags.txt")
