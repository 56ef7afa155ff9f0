"""How `pdctl top` writes numbers and fits text: the dashboard's formats (static/pdctl-live.js
`fmt`), the glyphs of a UTF-8 or a plain ASCII terminal, and lines clipped to the width."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeGuard

NONE = "-"  # the dashboard's em dash; a hyphen on every terminal


@dataclass(frozen=True)
class Glyphs:
    """The characters a terminal can show: block bars and '≤' on UTF-8, ASCII otherwise."""

    full: str
    parts: str  # partial blocks from 1/8 up to 7/8 ("" on ASCII: no partial bars)
    at_most: str
    dot: str
    rule: str
    ellipsis: str


UNICODE = Glyphs(full="█", parts="▏▎▍▌▋▊▉", at_most="≤", dot="·", rule="┄", ellipsis="…")
ASCII = Glyphs(full="#", parts="", at_most="<=", dot="|", rule="-", ellipsis="~")


def glyphs_for(encoding: str | None) -> Glyphs:
    return UNICODE if (encoding or "").lower().replace("-", "") in ("utf8", "utf16") else ASCII


def _present(v: float | None) -> TypeGuard[float]:
    """A number to show: not None (JSON null) and not NaN."""
    return not (v is None or (isinstance(v, float) and math.isnan(v)))


def pct(v: float | None) -> str:
    if not _present(v):
        return NONE
    digits = 0 if v >= 0.995 or v == 0 else 1
    return f"{v * 100:.{digits}f}%"


def rate(v: float | None) -> str:
    if not _present(v):
        return NONE
    return f"{v:.{2 if v < 10 else 1}f}/s"


def millis(x: float) -> str:
    """Milliseconds as the dashboard writes them: 0.52 ms, 4.1 ms, 120 ms, 1.25 s."""
    if x < 1:
        return f"{x:.2f} ms"
    if x < 1000:
        return f"{x:.{1 if x < 10 else 0}f} ms"
    return f"{x / 1000:.2f} s"


def seconds_as_ms(v: float | None) -> str:
    return millis(v * 1000) if _present(v) else NONE


def ms(v: float | None) -> str:
    return millis(v) if _present(v) else NONE


def bytes_per_s(v: float | None) -> str:
    if not _present(v):
        return NONE
    units, i = ("B", "KB", "MB", "GB", "TB"), 0
    while abs(v) >= 1000 and i < len(units) - 1:
        v /= 1000
        i += 1
    return f"{v:.{2 if v < 10 else 1}f} {units[i]}/s"


def count(v: float | None) -> str:
    """A histogram count: whole numbers as such, windowed fractions to one place, 12k past 9999."""
    if not _present(v):
        return NONE
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


def clip(line: str, width: int, glyphs: Glyphs = ASCII) -> str:
    """`line` no longer than `width`, its cut marked; trailing blanks dropped."""
    line = line.rstrip()
    if len(line) <= width:
        return line
    if width <= len(glyphs.ellipsis):
        return line[:width]
    return line[: width - len(glyphs.ellipsis)] + glyphs.ellipsis


def columns(cells: list[tuple[str, int, str]]) -> str:
    """Cells of (text, width, align '<' or '>') joined by one space, each cut to its width."""
    return " ".join(f"{text[:w]:{align}{w}}" for text, w, align in cells)
