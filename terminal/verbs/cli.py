"""The operator verbs, each a client of `pdctl serve`'s REST API: `ls`, `show`, `history`,
`diff`, `apply`, `start`, `stop`, `restart`, `switch`, `move`, `pause`, `release`, `drain`,
`undrain`, `events`, `logs`, `advise`,
`nodes`, the `rollout` group (status, abort, undo, history); and the resolver behind `pdctl bench
--deployment` (bench/target.py) and the caller behind `pdctl calibrate --deployment`
(calibrate_target.py, handed in by pdctl.py). Exit codes: terminal/exits.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from bench.target import use_resolver
from terminal.session import command
from terminal.verbs import advise as advise_verb
from terminal.verbs import apply as apply_verb
from terminal.verbs import attach as attach_verb
from terminal.verbs import follow as follow_verbs
from terminal.verbs import lifecycle as lifecycle_verbs
from terminal.verbs import move as move_verb
from terminal.verbs import nodes as nodes_verb
from terminal.verbs import read as read_verbs
from terminal.verbs import rollout as rollout_verbs
from terminal.verbs import steer as steer_verbs
from terminal.verbs import switch as switch_verb
from terminal.verbs.bench_target import deployment_target

VERBS: dict[str, Callable[..., Any]] = {
    "ls": read_verbs.ls,
    "show": read_verbs.show,
    "history": read_verbs.history,
    "diff": read_verbs.diff,
    "apply": apply_verb.apply,
    "attach": attach_verb.attach,
    "start": lifecycle_verbs.start,
    "stop": lifecycle_verbs.stop,
    "restart": lifecycle_verbs.restart,
    "switch": switch_verb.switch,
    "move": move_verb.move,
    "pause": steer_verbs.pause,
    "release": steer_verbs.release,
    "drain": steer_verbs.drain,
    "undrain": steer_verbs.undrain,
    "events": follow_verbs.events,
    "logs": follow_verbs.logs,
    "advise": advise_verb.advise,
    "nodes": nodes_verb.nodes,
}


def register(app: typer.Typer) -> None:
    for verb, fn in VERBS.items():
        command(app, verb, fn)
    rollout_verbs.register(app)
    use_resolver(deployment_target)
