"""The operator verbs, each a client of `pdctl serve`'s REST API: `ls`, `show`, `history`,
`diff`, `apply`, `start`, `stop`, `restart`, `switch`, `move`, `events`, `logs`, `advise`; and the
resolver behind `pdctl bench --deployment` (bench/target.py). Exit codes: terminal/exits.py."""

from __future__ import annotations

import typer

from bench.target import use_resolver
from terminal import (
    advise_verb,
    apply_verb,
    follow_verbs,
    lifecycle_verbs,
    move_verb,
    read_verbs,
    switch_verb,
)
from terminal.bench_target import deployment_target
from terminal.session import command

VERBS = {
    "ls": read_verbs.ls,
    "show": read_verbs.show,
    "history": read_verbs.history,
    "diff": read_verbs.diff,
    "apply": apply_verb.apply,
    "start": lifecycle_verbs.start,
    "stop": lifecycle_verbs.stop,
    "restart": lifecycle_verbs.restart,
    "switch": switch_verb.switch,
    "move": move_verb.move,
    "events": follow_verbs.events,
    "logs": follow_verbs.logs,
    "advise": advise_verb.advise,
}


def register(app: typer.Typer) -> None:
    for verb, fn in VERBS.items():
        command(app, verb, fn)
    use_resolver(deployment_target)
