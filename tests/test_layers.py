"""The floors of ARCHITECTURE.md, kept true: every module's imports are read, and a package
may import only the packages its floor allows (below it, never sideways or up), and never a
private (`_name`) module of another package.

The allowed edges, in one place:

| package    | floor | may import                                                    |
| ---------- | ----- | ------------------------------------------------------------- |
| domain     | 1     | nothing of pdctl's                                            |
| state      | 2     | domain                                                        |
| connector  | 2     | domain                                                        |
| simulator  | 2     | domain                                                        |
| bench      | 2     | domain                                                        |
| controller | 3     | domain, state, connector, simulator (its flags)               |
| observe    | 3     | domain, state                                                 |
| services   | 4     | every floor below (what web's lifespan composes)              |
| web        | 5     | every floor below                                             |
| terminal   | 5     | domain, bench (a client of the API, never of state or below)  |
| pdctl.py   | 6     | every package (it registers their verbs)                      |
| harness    | -     | the product, never tests (the tests' and benchmarks' helpers) |
| benchmarks | -     | the product and harness, never tests                          |

Inside a package the same holds between its rooms (sub-packages, or modules directly in it):
`FLOORS` lists each package's rooms floor by floor, a room imports only its own modules and
rooms on floors below it, and the rooms not listed form the package's top floor (its door:
the app, the CLI), which may import anything in the package. The floors above the controller
(services/, web/) reach it through its one door, `controller`, never its rooms.
"""

from __future__ import annotations

import ast
from pathlib import Path

from harness.processes import ROOT

PRODUCT = (
    "domain",
    "state",
    "connector",
    "simulator",
    "bench",
    "controller",
    "observe",
    "services",
    "web",
    "terminal",
)
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "state": {"domain"},
    "connector": {"domain"},
    "simulator": {"domain"},
    "bench": {"domain"},
    "controller": {"domain", "state", "connector", "simulator"},
    "observe": {"domain", "state"},
    "services": {"domain", "state", "connector", "simulator", "bench", "controller", "observe"},
    "web": {
        "domain",
        "state",
        "connector",
        "simulator",
        "bench",
        "controller",
        "observe",
        "services",
    },
    "terminal": {"domain", "bench"},
    "pdctl": set(PRODUCT),
    "harness": set(PRODUCT),
    "benchmarks": {*PRODUCT, "harness"},
}
KNOWN = {*ALLOWED, "tests"}
# Each package's rooms, floor by floor (lowest first); unlisted rooms are its top floor.
FLOORS: dict[str, list[set[str]]] = {
    # The KV-connector backends stand on the words they use; the rest of domain may ask them.
    "domain": [{"modes"}, {"kv_connectors"}],
    "controller": [
        {"spec"},
        {"launch"},
        {"manifests", "backends", "clients", "autopilot"},
        {"supervise"},
        {"switch"},
        {"rollout"},
    ],
    "connector": [
        {"errors"},  # the fault types every room raises, the HTTP client's among them
        {"registry", "http"},
        {"legs"},
        {"pool"},
        {"measure", "settings"},
        {"dispatch", "membership"},
        {"proxy"},
        {"api"},
    ],
    "simulator": [
        {"model"},
        {"engine", "protocol"},
        {"config", "metrics", "plan"},
        {"kv"},
        {"server"},
    ],
    "observe": [
        {"frames", "canary"},
        {"metrics"},
        {"sections", "attached"},
        {"build"},
        {"advice"},
    ],
    "web": [
        {"settings", "htmx", "diff", "metrics", "database", "serve_logs", "left_running"},
        {"errors", "proxy_url"},
        {"security"},
        {"deps"},
        {"views", "schemas", "proxy_log"},
        {"routes", "event_relay"},
        {"pages"},
    ],
    "terminal": [
        {"config", "exits", "log_tail", "polling", "readiness", "specs"},
        {"serving_roles"},
        {"tables", "client"},
        {"views", "rollout_views", "reconnect", "session"},
        {"event_stream"},
        {"verbs"},
        {"top"},
    ],
    "bench": [
        {"records", "sse", "target", "whole_file"},
        {"config", "summary", "progress"},
        {"client", "offer", "report", "model_prompts"},
        {"turns", "workers"},
        {"runner"},
    ],
}
# Packages whose callers above use one door (the package itself), never its rooms.
DOORS: dict[str, set[str]] = {"controller": {"services", "web"}}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, `from x import y` as `x.y`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def floor_of(package: str, room: str) -> int:
    floors = FLOORS.get(package, [])
    return next((i for i, rooms in enumerate(floors) if room in rooms), len(floors))


def room_violation(package: str, room: str, parts: list[str]) -> str | None:
    """Why `parts` (an import inside `package`, made from `room`) breaks the floors, if it does."""
    if len(parts) < 2 or parts[1] == room:
        return None
    target = parts[1]
    mine, theirs = floor_of(package, room), floor_of(package, target)
    top = len(FLOORS.get(package, []))
    if theirs < mine or (mine == top and theirs == top):
        return None
    return f"{package}/{room} may not import its room {target}"


def violations(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        owner = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if owner not in ALLOWED:
            continue  # tests/, migrations/ and the like may import anything
        room = Path(rel.parts[1]).stem if len(rel.parts) > 1 else ""
        for line, module in imports_of(path):
            parts = module.split(".")
            target = parts[0]
            where = f"{rel}:{line} imports {module}"
            if target == owner and room != "__init__":
                why = room_violation(owner, room, parts)
                if why:
                    out.append(f"{where}: {why}")
                continue
            if target not in KNOWN or target == owner:
                continue
            if owner in DOORS.get(target, set()) and len(parts) > 2:
                out.append(f"{where}: {owner} uses {target}'s door, not its rooms")
            if target not in ALLOWED[owner]:
                out.append(f"{where}: {owner} may not import {target}")
            elif any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                out.append(f"{where}: a private module of another package")
    return out


def test_every_import_follows_the_floors():
    assert violations(ROOT) == []


def test_a_planted_upward_import_is_caught(tmp_path):
    for package in ("domain", "web", "connector", "simulator"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "domain" / "slo.py").write_text("from web.app import create_app\n")
    (tmp_path / "connector" / "proxy.py").write_text("import simulator.server.app\n")
    (tmp_path / "simulator" / "x.py").write_text("from domain._secret import k\n")
    (tmp_path / "web" / "app.py").write_text("from domain import slo\n")
    found = violations(tmp_path)
    assert len(found) == 3, found
    assert "domain/slo.py:1 imports web.app.create_app: domain may not import web" in found
    assert any("connector may not import simulator" in v for v in found)
    assert any("a private module of another package" in v for v in found)


def test_a_planted_import_up_a_room_or_past_a_door_is_caught(tmp_path):
    for room in ("controller", "controller/spec", "controller/switch", "web"):
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
    (tmp_path / "controller" / "spec" / "deployment.py").write_text(
        "from controller.switch.plan import steps\n"
    )
    (tmp_path / "controller" / "switch" / "plan.py").write_text(
        "from controller.spec.deployment import DeploymentSpec\n"
    )
    (tmp_path / "web" / "app.py").write_text(
        "from controller import DeploymentSpec\nfrom controller.switch.plan import steps\n"
    )
    found = violations(tmp_path)
    assert found == [
        "controller/spec/deployment.py:1 imports controller.switch.plan.steps: "
        "controller/spec may not import its room switch",
        "web/app.py:2 imports controller.switch.plan.steps: web uses controller's door, "
        "not its rooms",
    ], found


def test_the_controllers_door_gives_every_name_it_lists():
    import controller

    for name in controller.__all__:
        assert getattr(controller, name) is not None, name
