"""What `pdctl top` shows, as lines: the last frame of one deployment (observe/frames.py's
JSON, as the dashboard receives it), the latest events and the connection's state in; at
most `height` lines of at most `width` characters out. Pure: no terminal, no socket, no clock.

The screen is a list of sections (SECTIONS), drawn in that order. Each has a priority, the
rows it needs to be shown at all and the rows it would like; on a small terminal the least
important sections shrink, then drop, so nothing ever wraps or scrolls. A new section (issue
18's "is PD happening" and canary lines) is one more entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from domain.kv_connectors import metric_prefixes
from terminal.tables import node_address
from terminal.top import format as fmt
from terminal.top.format import ASCII, Glyphs, clip, columns
from terminal.top.hist import histograms, histograms_wanted

WINDOW_KEYS = {"1": "10s", "2": "1m", "3": "5m"}
MAX_EVENTS = 6
MAX_INSTANCES = 8  # rows before "+N more" on a full screen, so a big fleet leaves room


@dataclass
class View:
    """Everything the screen shows; the shell fills it, `render` draws it."""

    deployment: str | None
    window: str
    frame: Mapping[str, Any] | None = None
    events: list[Mapping[str, Any]] = field(default_factory=list)  # newest last
    status: str = "connecting"  # the connection, short: live, retrying in 2 s ...
    notice: str | None = None  # a line under the header: why the feed is down or no frame
    units: Sequence[Mapping[str, Any]] | None = None  # /status rows, drawn while no frame
    position: tuple[int, int] | None = None  # (index from 1, count) among the deployments
    clock: str = ""  # the time shown in the corner, formatted by the shell
    keys: bool = True  # the key help is shown (not when nothing reads the keys)


Draw = Callable[[View, int, int, Glyphs], list[str]]
Want = Callable[[View, int], int]


@dataclass(frozen=True)
class Section:
    name: str
    priority: int  # 0 first: the most important keeps its rows longest
    least: int  # rows it needs to be shown at all
    want: Want
    draw: Draw
    shown: Callable[[View], bool] = lambda v: True
    unbounded: Want | None = None  # the rows wanted with no height (--once), if more


# -- sections ------------------------------------------------------------------------------


def header(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    f = v.frame or {}
    where = v.deployment or "no deployment"
    if v.position and v.position[1] > 1:
        where += f" ({v.position[0]}/{v.position[1]})"
    parts = ["pdctl top", where, f"window {v.window}"]
    if f.get("simulated"):
        parts.append("simulated")
    parts.append(v.status)
    left = f" {g.dot} ".join(parts)
    room = width - len(left) - 1
    return [left + (f" {v.clock:>{room}}" if v.clock and room >= len(v.clock) else "")]


def notice(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    return [v.notice or ""]


def headline_groups(f: Mapping[str, Any], g: Glyphs) -> list[list[str]]:
    """The dashboard's tiles as phrases, a group to a line where the width allows."""
    slo, kv, out = f.get("slo") or {}, f.get("kv") or {}, f.get("outcomes") or {}
    windows = f.get("windows") or {}
    by_window = f" {g.dot} ".join(
        f"{w} {fmt.pct((windows.get(w) or {}).get('slo_attainment'))}"
        for w in WINDOW_KEYS.values()
        if w in windows
    )
    proxy = f.get("proxy") or {}
    return [
        [
            f"SLO attainment {fmt.pct(f.get('slo_attainment'))}",
            # beside it: the requests that could not be served count in it as unmet
            rejected(f.get("rejected_share"), out.get("rejected")),
            f"Goodput {fmt.rate(f.get('request_goodput'))}",
            f"Request rate {fmt.rate(f.get('request_rate'))}",
        ],
        [
            f"  TTFT {g.at_most} {_target(slo.get('ttft_ms'))}, "
            f"ITL {slo.get('itl_stat') or 'p99'} {g.at_most} {_target(slo.get('itl_ms'))}",
            *([f"by window {by_window}"] if by_window else []),
        ],
        [
            f"KV transfer {fmt.bytes_per_s(kv.get('bytes_per_s'))} ({kv_note(kv)})",
            f"Running / waiting {f.get('running', 0)} / {f.get('waiting', 0)}",
            f"KV cache {fmt.pct(f.get('kv_cache_usage'))}",
        ],
        [
            f"Proxy {'up' if proxy.get('up') else 'down'}, {proxy.get('in_flight', 0)} in "
            f"flight, {proxy.get('held', 0)} held",
            f"Failed / rejected {fmt.rate(out.get('failed'))} / {fmt.rate(out.get('rejected'))}",
        ],
    ]


def rejected(share: float | None, per_s: float | None) -> str:
    """The share of requests rejected (503) and, when any were, their rate ("-": none
    ended)."""
    if not share:
        return f"Rejected {fmt.pct(share)}"
    return f"Rejected {fmt.pct(share)} ({fmt.rate(per_s)})"


def flow(groups: list[list[str]], width: int, gap: str = "   ") -> list[str]:
    """Each group's phrases on one line, a phrase that would not fit on a line of its own."""
    lines = []
    for phrases in groups:
        line = ""
        for phrase in phrases:
            if line and len(line) + len(gap) + len(phrase) > width:
                lines.append(line)
                line = "  " + phrase.lstrip()
            else:
                line = f"{line}{gap}{phrase}" if line else phrase
        lines.append(line)
    return lines


def headline(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    return flow(headline_groups(v.frame or {}, g), width)[:rows]


def headline_rows(v: View, width: int) -> int:
    return len(flow(headline_groups(v.frame or {}, ASCII), width))


def _target(value: float | None) -> str:
    return fmt.NONE if value is None else f"{value:g} ms"


def kv_note(kv: Mapping[str, Any]) -> str:
    """Where the KV figure comes from, as the dashboard's tile says it."""
    if kv.get("source") in metric_prefixes():  # a connector's own vllm:<prefix>_* figures
        p50, p99 = fmt.ms(kv.get("xfer_p50_ms")), fmt.ms(kv.get("xfer_p99_ms"))
        return f"from vllm:{kv['source']}_*, p50 {p50} p99 {p99}"
    if kv.get("source") == "derived":
        return "derived"
    return "not reported"


def pd_line(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    """ "Is PD happening?" (the frame's `pd`, observe/sections/pd_check.py): which decode recomputes
    and since when; each decode's share of prompt tokens by KV transfer otherwise."""
    pd = (v.frame or {}).get("pd") or {}
    if not pd.get("applies"):
        why = pd.get("why") or "not checked yet"
        return [f"PD check  does not apply ({why})" if "colocated" in why else f"PD check  {why}"]
    rows_ = pd.get("decodes") or []
    bad = [r for r in rows_ if r.get("status") == "recomputing"]
    if bad:
        return [
            "PD NOT HAPPENING  "
            + "; ".join(
                f"{r['instance']} recomputes since {event_time(r.get('since'))}"
                f" ({fmt.pct(r.get('share'))} by KV)"
                for r in bad
            )
        ]
    each = ", ".join(
        f"{r['instance']} {fmt.pct(r['share']) if r.get('status') == 'ok' else r.get('status')}"
        for r in rows_
    )
    return [f"PD happening  {each or 'no decode'}  (prompt tokens by KV transfer, 10 s)"]


def canary_line(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    """The correctness canary's last verdict (the frame's `canary`, observe/canary/state.py), so a
    failing canary shows beside the attainment that still counts those answers as met."""
    section = (v.frame or {}).get("canary") or {}
    line = section.get("line") or "canary: not checked yet"
    return [line.replace("canary FAILING", "CANARY FAILING", 1)]


def hist(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    return histograms(v.frame or {}, width, rows, g)


INSTANCE_COLUMNS = (
    ("INSTANCE", 14, "<"),
    ("ROLE", 8, "<"),
    ("STATE", 8, "<"),
    ("UP", 4, "<"),
    ("NODE", 15, "<"),
    ("MODE", 9, "<"),
    ("RUN", 3, ">"),
    ("WAIT", 4, ">"),
    ("KV", 4, ">"),
)


def instance_rows(v: View) -> list[Mapping[str, Any]]:
    if v.frame is not None:
        return list(v.frame.get("instances") or [])
    return list(v.units or [])


def node_of(row: Mapping[str, Any]) -> str:
    """The node a process is on, as `pdctl show` prints it."""
    return node_address(row) or fmt.NONE


def instance_line(row: Mapping[str, Any], live: bool) -> str:
    up = ("up" if row.get("up") else "down") if live else fmt.NONE
    usage = row.get("kv_cache_usage")
    values = (
        str(row.get("name", "?")),
        str(row.get("role") or fmt.NONE),
        str(row.get("state") or fmt.NONE),
        up,
        node_of(row),
        str(row.get("mode") or fmt.NONE),
        str(row.get("running", fmt.NONE)) if live and row.get("up") else fmt.NONE,
        str(row.get("waiting", fmt.NONE)) if live and row.get("up") else fmt.NONE,
        fmt.NONE if usage is None else f"{usage * 100:.0f}%",
    )
    cells = [(text, w, a) for text, (_, w, a) in zip(values, INSTANCE_COLUMNS, strict=True)]
    return columns(cells)


def instances(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    found = instance_rows(v)
    head = columns([(name, w, a) for name, w, a in INSTANCE_COLUMNS])
    if not found:
        return [head, "no instances (the deployment has never been started)"][:rows]
    shown = found if len(found) <= rows - 1 else found[: max(0, rows - 2)]
    lines = [head] + [instance_line(r, v.frame is not None) for r in shown]
    if len(shown) < len(found):
        lines.append(f"+{len(found) - len(shown)} more")
    return lines[:rows]


def events(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    if not v.events:
        return ["Events  none yet"]
    lines = ["Events"]
    for e in reversed(v.events[-(rows - 1) :] if rows > 1 else []):
        when = event_time(e.get("ts"))
        who = e.get("actor") or fmt.NONE
        lines.append(
            f"{when} {e.get('kind', ''):<18} {who}: {' '.join(str(e.get('message', '')).split())}"
        )
    return lines[:rows]


def event_time(ts: Any) -> str:
    """An event's time of day, local: the API sends ISO 8601 (UTC), epoch seconds also do."""
    try:
        if isinstance(ts, int | float):
            moment = datetime.fromtimestamp(ts, UTC)
        else:
            moment = datetime.fromisoformat(str(ts))
    except (ValueError, OverflowError, OSError):
        return "--:--:--"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%H:%M:%S")


def autopilot_line(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    """The P:D autopilot's mode and last move (the frame's `autopilot`, services/autopilot_loop.py),
    so a ratio that changes under the on-call engineer says who changed it and why."""
    section = (v.frame or {}).get("autopilot") or {}
    return [section.get("line") or f"autopilot: {section.get('mode', 'on')}"]


def keys(v: View, width: int, rows: int, g: Glyphs) -> list[str]:
    windows = " ".join(
        f"{k} {'[' + w + ']' if w == v.window else w}" for k, w in WINDOW_KEYS.items()
    )
    return [f"keys: {windows}  w next window  n/p deployment  q quit"]


def _one(v: View, width: int) -> int:
    return 1


SECTIONS: tuple[Section, ...] = (
    Section("header", 0, 1, _one, header),
    Section("notice", 2, 1, _one, notice, lambda v: bool(v.notice)),
    Section("headline", 3, 1, headline_rows, headline, lambda v: v.frame is not None),
    Section("pd", 3, 1, _one, pd_line, lambda v: v.frame is not None),
    Section("canary", 3, 1, _one, canary_line, lambda v: bool((v.frame or {}).get("canary"))),
    Section(
        "autopilot", 3, 1, _one, autopilot_line, lambda v: bool((v.frame or {}).get("autopilot"))
    ),
    Section(
        "histograms",
        5,
        3,
        lambda v, w: histograms_wanted(v.frame or {}, w),
        hist,
        lambda v: v.frame is not None,
    ),
    Section(
        "instances",
        4,
        2,
        lambda v, w: 1 + max(1, min(MAX_INSTANCES, len(instance_rows(v)))),
        instances,
        unbounded=lambda v, w: 1 + max(1, len(instance_rows(v))),
    ),
    Section("events", 6, 3, lambda v, w: 1 + max(1, min(MAX_EVENTS, len(v.events))), events),
    Section("keys", 1, 1, _one, keys, lambda v: v.keys),
)


# -- layout --------------------------------------------------------------------------------


def allot(view: View, width: int, height: int | None) -> dict[str, int]:
    """Rows per section: each its least in priority order while they fit, then what is left
    to each in priority order up to what it wants. Without a height, all it wants."""
    chosen = [s for s in SECTIONS if s.shown(view)]
    if height is None:
        return {s.name: max(s.least, (s.unbounded or s.want)(view, width)) for s in chosen}
    wants = {s.name: max(s.least, s.want(view, width)) for s in chosen}
    rows: dict[str, int] = {}
    left = height
    by_priority = sorted(chosen, key=lambda s: s.priority)
    for s in by_priority:
        if s.least <= left:
            rows[s.name], left = s.least, left - s.least
    for s in by_priority:
        if s.name in rows:
            more = min(wants[s.name] - rows[s.name], left)
            rows[s.name], left = rows[s.name] + more, left - more
    return rows


def render(view: View, width: int, height: int | None = None, g: Glyphs = ASCII) -> list[str]:
    """The screen: at most `height` lines (exactly that many when given: the key help on the
    last), none longer than `width`."""
    width = max(1, width)
    rows = allot(view, width, height)
    drawn = {name: _draw(view, name, width, n, g) for name, n in rows.items() if n > 0}
    if height is not None:  # rows a section left unused (a compact form) go to the next
        spare = height - sum(len(d) for d in drawn.values())
        for s in sorted(SECTIONS, key=lambda s: s.priority):
            if spare <= 0 or s.name not in drawn or len(drawn[s.name]) < rows[s.name]:
                continue
            more = _draw(view, s.name, width, rows[s.name] + spare, g)
            spare -= len(more) - len(drawn[s.name])
            drawn[s.name] = more
    lines = [line for s in SECTIONS if s.name != "keys" for line in drawn.get(s.name, [])]
    tail = drawn.get("keys", [])
    if height is not None:
        lines += [""] * (height - len(lines) - len(tail))
    return (lines + tail)[: height if height is not None else None]


def _draw(view: View, name: str, width: int, rows: int, g: Glyphs) -> list[str]:
    section = next(s for s in SECTIONS if s.name == name)
    return [clip(line, width, g) for line in section.draw(view, width, rows, g)[:rows]]
