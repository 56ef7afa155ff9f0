"""A fast reader for the part of the Prometheus text exposition format that vLLM and the
stand-in write, giving exactly the families `prometheus_client.parser` gives for that text.

The subset, line by line (each stripped; blank lines skipped):
- `# HELP NAME [text]` and `# TYPE NAME TYPE`, single spaces;
- `NAME VALUE [TIMESTAMP]` and `NAME{label="value",...} VALUE [TIMESTAMP]`, single spaces, no
  spaces inside the braces, label values escaping only `\\\\`, `\\"` and `\\n`, no label named
  `__...`, none twice; VALUE and TIMESTAMP decimal (int when prometheus_client would make one
  an int: digits only), `+Inf`, `-Inf`, `Inf` or `NaN`.
Anything else (another comment, tabs, a trailing comma, exemplars, a malformed line) raises
`Unsupported` and the caller hands the whole page to prometheus_client, so such a page reads,
or fails, exactly as before. Grouping follows prometheus_client's own rules (a sample outside
its family's names is a family of its own; a counter family drops `_total` from its name).

The series part of a line (name and labels) and its value part repeat scrape after scrape, so
both are parsed once and memoised (bounded caches).
"""

from __future__ import annotations

import re
from functools import lru_cache

Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]  # sample name, sorted labels, value (an int or a float)
Family = tuple[str, str, list[Sample]]  # name, type (prometheus_client's), samples

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\[\\"n])*"'
_NAME_RE = re.compile(_NAME)
_SERIES_RE = re.compile(rf"({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})?")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\[\\"n])*)"')
_NUMBER_RE = re.compile(
    r"([+-]?[0-9]+)|[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN"
)
_ESCAPE_RE = re.compile(r'\\[\\n"]')  # prometheus_client's, applied the same way
_ESCAPES = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}
# TYPE words prometheus_client's Metric takes ("untyped" becomes "unknown").
_TYPES = frozenset(
    ("counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset",
     "gaugehistogram")
)  # fmt: skip
_SUFFIXES = {"histogram": ("_count", "_sum", "_bucket"), "summary": ("_count", "_sum", "")}
_CACHE_SIZE = 1 << 14  # series lines; a vLLM page has ~500, shared by instances of one model
# Values: the constant ones (zero counters, idle gauges) stay hot; a counter that moves has a
# new value every scrape, and a cache as large as the series one would keep 16,384 of them
# (~2.5 MB of pdctl serve's RSS) for nothing.
_VALUE_CACHE_SIZE = 1 << 12


class Unsupported(Exception):
    """The text leaves the subset above; prometheus_client must read it."""


def read(text: str) -> list[Family]:
    """Every family of `text`, in order, as prometheus_client's text parser makes them
    (name, type, samples with sorted labels); raises Unsupported outside the subset."""
    families: list[Family] = []
    samples: list[Sample] = []
    allowed: tuple[str, ...] = ()
    name, typ = "", "untyped"
    for line in text.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line[0] == "#":
            kind, new, new_type = _comment(line)
            if new != name:
                if name:
                    families.append(_family(name, typ, samples))
                name, samples = new, []
                if kind == "HELP":
                    typ, allowed = "untyped", (new,)
            if kind == "TYPE":
                typ = new_type
                allowed = tuple(new + s for s in _SUFFIXES.get(typ, ("",)))
            continue
        cut = line.rfind("}") + 1 or line.find(" ")
        series = _series(line[:cut]) if cut > 0 else None
        value = _value(line[cut:]) if series is not None else None
        if series is None or value is None:  # (value is None whenever series is)
            raise Unsupported(line)
        sample_name, labels = series
        if sample_name in allowed:
            samples.append((sample_name, labels, value))
        else:  # outside the current family: a family of its own, and the current one ends
            if name:
                families.append(_family(name, typ, samples))
            name, typ, samples, allowed = "", "untyped", [], ()
            families.append(_family(sample_name, "untyped", [(sample_name, labels, value)]))
    if name:
        families.append(_family(name, typ, samples))
    return families


def _family(name: str, typ: str, samples: list[Sample]) -> Family:
    if typ == "counter":
        if name.endswith("_total"):
            name = name[:-6]
        else:
            samples = [(n + "_total", labels, v) for n, labels, v in samples]
    elif typ == "untyped":
        typ = "unknown"
    if not name:  # "# TYPE _total counter": prometheus_client refuses the family
        raise Unsupported("_total")
    return name, typ, samples


@lru_cache(maxsize=1024)
def _comment(line: str) -> tuple[str, str, str]:
    """("HELP", name, "") or ("TYPE", name, type)."""
    if line.startswith("# TYPE "):
        parts = line[7:].split(" ")
        if len(parts) == 2 and _NAME_RE.fullmatch(parts[0]) and parts[1] in _TYPES:
            return "TYPE", parts[0], parts[1]
    elif line.startswith("# HELP "):
        name = line[7:].split(" ", 1)[0]
        if _NAME_RE.fullmatch(name):
            return "HELP", name, ""
    raise Unsupported(line)


@lru_cache(maxsize=_CACHE_SIZE)
def _series(head: str) -> tuple[str, Labels] | None:
    """`name{labels}` as (name, sorted labels); None outside the subset."""
    match = _SERIES_RE.fullmatch(head)
    if match is None:
        return None
    labels: dict[str, str] = {}
    for key, raw in _LABEL_RE.findall(match.group(2) or ""):
        if key in labels or key.startswith("__"):
            return None
        labels[key] = _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], raw) if "\\" in raw else raw
    return match.group(1), tuple(sorted(labels.items()))


@lru_cache(maxsize=_VALUE_CACHE_SIZE)
def _value(rest: str) -> float | None:
    """` VALUE [TIMESTAMP]` as the value; None outside the subset."""
    if rest[:1] != " ":
        return None
    parts = rest[1:].split(" ")
    if len(parts) > 2 or (len(parts) == 2 and not _timestamp(parts[1])):
        return None
    return _number(parts[0])


def _timestamp(text: str) -> bool:
    """Whether prometheus_client takes `text` as a timestamp (it divides it by 1000)."""
    stamp = _number(text)
    try:
        return stamp is not None and stamp / 1000 is not None
    except OverflowError:  # an int past float's range
        return False


def _number(text: str) -> float | None:
    match = _NUMBER_RE.fullmatch(text)
    if match is None:
        return None
    return int(text) if match.group(1) else float(text)
