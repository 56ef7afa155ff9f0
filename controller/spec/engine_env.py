"""What a spec may put in an engine's environment: the names of one table
(controller/spec/surface/env.txt), each by what it does, never a denylist.

Every name there has a kind: a setting (value), a directory or file the engine loads from or
writes to (path: only under the operator's roots), an address it listens on (listener: only
the instance's bound address), or something a spec never gives (code: names a program, module,
library, plugin or code-bearing file, as UCX_GDB_COMMAND, VLLM_PLUGINS or LD_LIBRARY_PATH;
remote: a server elsewhere, as HF_ENDPOINT; refused: anything else, with why). A name not in
the table is refused: a family such as UCX_* is open only as far as its vetted names, so a
variable a new library version reads is refused until someone says what it does. Values are
read too: a setting that reads as code (`ext://MODULE`, `cfg://`, `*module_path*`) is refused
whatever its name. Names are case-sensitive, as the processes reading them are.

The same table holds for the stand-in (engine "sim"): it plays vLLM, so a spec moves between
the two unchanged, and it reads nothing else from its environment that a spec should set.
"""

from __future__ import annotations

from controller.spec.surface import values
from controller.spec.surface.kinds import NEVER, Entry, env_table
from controller.spec.surface.reach import EngineReach

TABLE_FILE = "controller/spec/surface/env.txt"


def refusal(name: str) -> str | None:
    """Why `name` may not be in a spec's env, whatever its value; None when it may."""
    entry = env_table().get(name)
    if entry is None:
        return (
            f"{name} is not an engine setting a spec may give: only the names of {TABLE_FILE} "
            "are, each by what it does (a family such as UCX_* only as far as its vetted names)"
        )
    if entry.kind in NEVER:
        return f"{name} {entry.refusal()}"
    return None


def check(name: str, value: str, reach: EngineReach) -> str | None:
    """Why `name`=`value` may not be in a spec's env; None when it may."""
    if (why := refusal(name)) is not None:
        return why
    entry: Entry = env_table()[name]
    found = values.problems(entry, value, reach)
    return f"{name}: {'; '.join(found)}" if found else None
