"""Reading the spec `pdctl apply -f` is given: JSON by json, YAML by PyYAML's safe loader
(pinned in pyproject), `-` for stdin (YAML, which reads JSON too). A file that cannot be a
spec is one line naming the file and the problem, said before anything is sent."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

KINDS = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
STDIN = "-"


class SpecFileError(ValueError):
    """One line: the file, then what is wrong with it."""


def read_spec(given: str) -> dict[str, Any]:
    """The spec in the file (or stdin), as the JSON object the API takes."""
    if given == STDIN:
        return parse(sys.stdin.read(), "stdin", "yaml")
    path = Path(given)
    kind = KINDS.get(path.suffix.lower())
    if kind is None:
        raise SpecFileError(
            f"{path}: unknown extension {path.suffix or '(none)'!r}: use .json, .yaml or .yml"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SpecFileError(f"{path}: is a directory, not a spec file") from None
    except UnicodeDecodeError:
        raise SpecFileError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise SpecFileError(f"{path}: cannot read it ({exc.strerror})") from None
    return parse(text, str(path), kind)


def parse(text: str, source: str, kind: str) -> dict[str, Any]:
    """`text` as a spec: a mapping with a name, every value one JSON can carry."""
    data = _json(text, source) if kind == "json" else _yaml(text, source)
    if data is None:
        raise SpecFileError(f"{source}: empty: a spec is a mapping of fields (name, model, ...)")
    if not isinstance(data, dict):
        raise SpecFileError(f"{source}: the spec must be a mapping of fields, not {_kind_of(data)}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise SpecFileError(f"{source}: name: the spec must name its deployment (a string)")
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SpecFileError(f"{source}: a value JSON cannot carry ({exc})") from None
    return data


def _json(text: str, source: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecFileError(
            f"{source}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def _yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecFileError(f"{source}: not YAML: {problem}{where}") from None


def _kind_of(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    return f"a {type(data).__name__} ({str(data)[:40]!r})"
