"""No code outside the KV-connector backends (domain/kv_connectors/) branches on a connector's
name (ARCHITECTURE.md, "Rooms inside rooms"): every module of the product is parsed, and a
comparison or membership test against a connector's name, a `match` on one, or a table keyed
by connector names is reported with its file and line; so is a comparison in a template.

What names a connector: `Connector.X`, a string that is a KV connector's name (vLLM's
"NixlConnector", the proxy's "nixl", a metric prefix), `MODE_CONNECTORS`, and any module-level
constant bound to one of those (`MORIIO = "MoRIIOConnector"`, `("nixl", "moriio")`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from harness.processes import ROOT
from tests.test_layers import PRODUCT as PACKAGES

# The product's packages, and the harness that starts them.
PRODUCT = (*PACKAGES, "harness")
BACKENDS = Path("domain", "kv_connectors")
TEMPLATES = Path("web", "templates")
# Constants that stand for connectors as a kind, never one of them by name.
CONNECTOR_CONSTANTS = frozenset({"MODE_CONNECTORS", "PROXY_CONNECTORS"})
# (file, line text) -> why a branch there cannot ask a backend. Keep it short.
ALLOWLIST: dict[tuple[str, str], str] = {}


def connector_names() -> frozenset[str]:
    """Every spelling of a KV connector the product knows: vLLM's class names and the short
    names the proxy and vLLM's metric prefixes use."""
    from domain.modes import Connector

    names = {c.value for c in Connector}
    try:
        from domain.kv_connectors import all_backends
    except ImportError:  # a tree from before the backends (the count on main at f24504f)
        # Only that tree has it: the ignore is for a type checker reading this one.
        from domain.modes import PROXY_CONNECTORS

        return frozenset(names | set(PROXY_CONNECTORS))
    for b in all_backends():
        names |= {n for n in (b.connector, b.proxy_name, b.metric_prefix) if n}
    return frozenset(names)


class _Finder(ast.NodeVisitor):
    def __init__(self, names: frozenset[str], aliases: set[str]) -> None:
        self.names = names
        self.aliases = aliases
        self.found: list[tuple[int, str]] = []

    def names_connector(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in self.names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(self.names_connector(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "Connector":
                return True
            return node.attr in self.aliases
        if isinstance(node, ast.Name):
            return node.id in self.aliases
        if isinstance(node, ast.Call):  # frozenset({...}), tuple(...)
            return any(self.names_connector(a) for a in node.args)
        return False

    def aliases_in(self, tree: ast.Module) -> set[str]:
        """Module-level constants bound to a connector's name (or a collection of them)."""
        found = set()
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if self.names_connector(stmt.value) and not isinstance(stmt.value, ast.Dict):
                    found |= {t.id for t in targets if isinstance(t, ast.Name)}
        return found

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(self.names_connector(n) for n in (node.left, *node.comparators)):
            self.found.append((node.lineno, "compares"))
        self.generic_visit(node)

    def visit_match_case(self, node: ast.match_case) -> None:
        values = [n.value for n in ast.walk(node.pattern) if isinstance(n, ast.MatchValue)]
        if any(self.names_connector(v) for v in values):
            self.found.append((node.pattern.lineno, "matches"))
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if any(k is not None and self.names_connector(k) for k in node.keys):
            self.found.append((node.lineno, "a table keyed by"))
        self.generic_visit(node)


def branches(root: Path, names: frozenset[str]) -> Iterator[str]:
    """`file:line: <kind> a connector's name` for each branch outside the backends."""
    paths = [p for package in PRODUCT for p in sorted((root / package).rglob("*.py"))]
    paths = [p for p in [*paths, root / "pdctl.py"] if p.exists()]
    trees = {p.relative_to(root): ast.parse(p.read_text(), str(p)) for p in paths}
    # An alias is caught wherever it is imported to: its name is collected from every module.
    aliases = set(CONNECTOR_CONSTANTS)
    for rel, tree in trees.items():
        if not rel.is_relative_to(BACKENDS):
            aliases |= _Finder(names, aliases).aliases_in(tree)
    for rel, tree in trees.items():
        if rel.is_relative_to(BACKENDS):
            continue
        lines = (root / rel).read_text().splitlines()
        finder = _Finder(names, aliases)
        finder.visit(tree)
        for line, kind in finder.found:
            if (str(rel), lines[line - 1].strip()) not in ALLOWLIST:
                yield f"{rel}:{line}: {kind} a connector's name: {lines[line - 1].strip()}"
    yield from template_branches(root, names)


def template_branches(root: Path, names: frozenset[str]) -> Iterator[str]:
    """Jinja comparisons with a connector's name: `== "MoRIIOConnector"`, `in ("nixl", ...)`."""
    spelled = "|".join(re.escape(n) for n in sorted(names))
    quoted = rf"""["']({spelled})["']"""
    compare = re.compile(rf"(==|!=|\bin\b)\s*\(?\s*{quoted}|{quoted}\s*(==|!=|\bin\b)")
    for path in sorted((root / TEMPLATES).rglob("*.html")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if compare.search(line):
                rel = path.relative_to(root)
                yield f"{rel}:{number}: compares a connector's name: {line.strip()[:100]}"


def test_no_code_outside_the_backends_branches_on_a_connectors_name():
    found = list(branches(ROOT, connector_names()))
    assert found == [], "\n".join(found)


def test_a_planted_branch_is_caught(tmp_path):
    (tmp_path / "web").mkdir()
    (tmp_path / "domain" / "kv_connectors").mkdir(parents=True)
    (tmp_path / "web" / "page.py").write_text(
        "from domain.modes import MODE_CONNECTORS, Connector\n"
        'NIXL = "NixlConnector"\n'
        "def f(spec):\n"
        '    if spec.connector == "moriio": pass\n'
        "    if spec.connector in MODE_CONNECTORS: pass\n"
        "    if spec.connector is Connector.NIXL: pass\n"
        "    if spec.connector != NIXL: pass\n"
        '    return {"NixlConnector": 1}.get(spec.connector)\n'
        "def g(c):\n"
        "    match c:\n"
        '        case "MoRIIOConnector": pass\n'
    )
    (tmp_path / "domain" / "kv_connectors" / "nixl.py").write_text(
        'def f(c):\n    return c == "NixlConnector"\n'
    )
    (tmp_path / "web" / "templates").mkdir()
    (tmp_path / "web" / "templates" / "page.html").write_text(
        '{% if spec.connector == "MoRIIOConnector" %}x{% endif %}\n'
        "{% if spec.kv_backend.has_modes %}y{% endif %}\n"
        "{% if kv.source in ('nixl', 'moriio') %}z{% endif %}\n"
    )
    found = list(branches(tmp_path, connector_names()))
    assert [f.split(": ")[0] for f in found] == [
        *(f"web/page.py:{n}" for n in (4, 5, 6, 7, 8, 11)),
        "web/templates/page.html:1",
        "web/templates/page.html:3",
    ]
