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
| controller | 3     | domain, state, connector (kv_config), simulator (its flags)   |
| observe    | 3     | domain, state                                                 |
| web        | 4     | every floor below                                             |
| terminal   | 4     | domain, bench (a client of the API, never of state or below)  |
| pdctl.py   | 5     | every package (it registers their verbs)                      |
| harness    | -     | the product, never tests (the tests' and benchmarks' helpers) |
| benchmarks | -     | the product and harness, never tests                          |
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
    "web": {"domain", "state", "connector", "simulator", "bench", "controller", "observe"},
    "terminal": {"domain", "bench"},
    "pdctl": set(PRODUCT),
    "harness": set(PRODUCT),
    "benchmarks": {*PRODUCT, "harness"},
}
KNOWN = {*ALLOWED, "tests"}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, `from x import y` as `x.y`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def violations(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        owner = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if owner not in ALLOWED:
            continue  # tests/, migrations/ and the like may import anything
        for line, module in imports_of(path):
            parts = module.split(".")
            target = parts[0]
            if target not in KNOWN or target == owner:
                continue
            where = f"{rel}:{line} imports {module}"
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
    (tmp_path / "connector" / "proxy.py").write_text("import simulator.server\n")
    (tmp_path / "simulator" / "x.py").write_text("from domain._secret import k\n")
    (tmp_path / "web" / "app.py").write_text("from domain import slo\n")
    found = violations(tmp_path)
    assert len(found) == 3, found
    assert "domain/slo.py:1 imports web.app.create_app: domain may not import web" in found
    assert any("connector may not import simulator" in v for v in found)
    assert any("a private module of another package" in v for v in found)
