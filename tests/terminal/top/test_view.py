"""`pdctl top`'s pure renderer: every size fits exactly, an empty frame and no frame say so,
percentiles and the SLO line land on the right rows, long lists are trimmed, and the text
itself never carries a control code."""

from __future__ import annotations

import io
import re

import pytest

from terminal.top.format import ASCII, UNICODE, clip, glyphs_for
from terminal.top.hist import Bucket, collapse_empty, histograms, merge_to, pane
from terminal.top.screen import FullScreen, PlainText, is_dumb, screen_for, split_keys
from terminal.top.view import View, event_time, render
from tests.terminal.top.frames import events, frame, hist, instance

ESCAPE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # any control character but tab and newline
ROW = re.compile(r"^\s*(?:≤|<=)(\S+ m?s)\s.*?\s(\d+)(?:\s+(p[\d/]+))?\s*$")


def busy_view(**over) -> View:
    crowd = [instance(f"decode-{i}", "decode") for i in range(30)]
    return View(
        "mori",
        "1m",
        frame(instances=crowd),
        events(40),
        status="live",
        position=(1, 3),
        clock="16:55:03",
        **over,
    )


def rows_of(lines: list[str]) -> dict[str, tuple[int, str]]:
    """Histogram rows of one pane by bound label: (count, marks)."""
    out = {}
    for line in lines:
        if m := ROW.match(line):
            out[m[1]] = (int(m[2]), m[3] or "")
    return out


@pytest.mark.parametrize(
    "size", [(80, 24), (80, 12), (60, 16), (40, 10), (120, 50), (20, 5), (80, 3), (200, 60)]
)
@pytest.mark.parametrize("g", [UNICODE, ASCII])
def test_every_size_fits_exactly(size, g) -> None:
    width, height = size
    for view in (busy_view(), View("idle", "10s", notice="no frames: idle is not running")):
        lines = render(view, width, height, g)
        assert len(lines) == height
        assert max(len(line) for line in lines) <= width
        assert not any(ESCAPE.search(line) for line in lines)


def test_80x24_shows_every_section_with_the_key_help_last() -> None:
    lines = render(busy_view(), 80, 24, UNICODE)
    text = "\n".join(lines)
    assert lines[0].startswith("pdctl top · mori (1/3) · window 1m · simulated · live")
    assert lines[0].endswith("16:55:03") and len(lines[0]) == 80
    assert "SLO attainment 98.5%" in text and "Goodput 7.90/s" in text
    assert "KV transfer 12.3 MB/s (derived)" in text
    assert "TTFT " in text and "ITL " in text and "SLO 200 ms" in text and "SLO 50 ms" in text
    assert re.search(r"^INSTANCE +ROLE +STATE +UP +NODE +MODE", text, re.M)
    assert re.search(r"^\+\d+ more$", text, re.M)
    assert "Events" in text and "event number 40" in text
    assert lines[-1] == "keys: 1 10s 2 [1m] 3 5m  w next window  n/p deployment  q quit"


def test_an_outage_shows_the_rejected_share_beside_attainment() -> None:
    outage = frame(slo_attainment=0.144, request_rate=5.1, rejected_share=0.83)
    outage["outcomes"] = {**outage["outcomes"], "ok": 0.8, "rejected": 4.25}
    text = "\n".join(render(View("mori", "1m", outage), 120, 24, ASCII))
    assert "SLO attainment 14.4%   Rejected 83.0% (4.25/s)   Goodput" in text
    healthy = "\n".join(render(View("mori", "1m", frame()), 120, 24, ASCII))
    assert "SLO attainment 98.5%   Rejected 0%   Goodput" in healthy


def test_a_long_instance_list_is_trimmed_with_how_many_more() -> None:
    lines = render(busy_view(), 80, 24)
    shown = [line for line in lines if line.startswith("decode-")]
    more = next(line for line in lines if line.endswith("more"))
    assert more == f"+{30 - len(shown)} more" and 1 <= len(shown) < 30
    everything = render(busy_view(), 80, None)  # --once: no height, every instance
    assert sum(line.startswith("decode-") for line in everything) == 30


def test_a_frame_with_no_data_says_so() -> None:
    empty = frame(ttft=[], itl=[], instances=[instance("decode-0", "decode", "STOPPED")])
    empty["kv"] = {"bytes_per_s": None, "source": None, "xfer_p50_ms": None, "xfer_p99_ms": None}
    empty["windows"] = {}
    lines = render(View("mori", "1m", empty, status="live"), 80, 24)
    text = "\n".join(lines)
    assert "SLO attainment -   Rejected -   Goodput -   Request rate -" in text
    assert text.count("no requests in the window") == 2
    assert "p50 -  p90 -  p99 -" in text
    assert "KV transfer - (not reported)" in text
    assert re.search(r"^decode-0 +decode +STOPPED +down .* - +- +- *$", text, re.M)
    assert "Events  none yet" in text


def test_no_frame_shows_the_notice_and_the_instances_status() -> None:
    units = [{"name": "decode-0", "role": "decode", "state": "STOPPED", "url": None}]
    view = View("mori", "1m", notice="no frames: mori is stopped", units=units)
    lines = render(view, 80, 24)
    assert lines[1] == "no frames: mori is stopped"
    assert any(re.match(r"decode-0 +decode +STOPPED +- ", line) for line in lines)
    assert not any("SLO attainment" in line for line in lines)


def test_percentiles_are_marked_on_the_rows_they_fall_in() -> None:
    # 50 requests at ~15 ms, 40 at ~30 ms, 10 at ~300 ms: p50 in (10, 20], p90 in (20, 40],
    # p99 in (250, 500] ms.
    h = hist((0.01, 0.02, 0.04, 0.1, 0.25, 0.5, 1.0), [0.015] * 50 + [0.03] * 40 + [0.3] * 10)
    lines = pane("TTFT", h, None, 60, 20, UNICODE)
    assert lines[1] == (
        f"p50 {h['p50'] * 1000:.0f} ms  p90 {h['p90'] * 1000:.0f} ms  p99 {h['p99'] * 1000:.0f} ms"
    )
    rows = rows_of(lines)
    assert rows["20 ms"] == (50, "p50")
    assert rows["40 ms"] == (40, "p90")
    assert rows["500 ms"] == (10, "p99")
    assert rows["250 ms"] == (0, "")  # an empty bucket between data is still a row


def test_the_slo_line_parts_the_buckets_within_from_those_past_it() -> None:
    h = hist((0.01, 0.025, 0.05, 0.075, 0.1), [0.02] * 30 + [0.06] * 5)
    at_bound = pane("ITL", h, 50.0, 60, 20, UNICODE)  # the SLO is a bucket bound
    labels = [line.split()[0] if "SLO" not in line else "SLO" for line in at_bound[2:]]
    assert labels.index("SLO") == labels.index("≤50") + 1
    assert labels[labels.index("SLO") + 1] == "≤75"
    between = pane("ITL", h, 60.0, 60, 20, ASCII)  # within (50, 75]: after 50, before 75
    labels = [line.split()[0] if "SLO" not in line else "SLO" for line in between[2:]]
    assert labels.index("SLO") == labels.index("<=50") + 1
    assert "-- SLO 60 ms" in between[2 + labels.index("SLO")]
    below = pane("ITL", h, 5.0, 60, 20, UNICODE)  # below every bound: the line comes first
    assert "SLO 5.0 ms" in below[2]
    assert not any("SLO" in line for line in pane("ITL", h, None, 60, 20, UNICODE))


def test_squeezed_rows_merge_the_emptiest_neighbours_but_never_across_the_slo() -> None:
    buckets = [Bucket(i, i + 1, c) for i, c in enumerate([0, 5, 0, 0, 9, 1, 0, 3])]
    merged, keep = merge_to(buckets, 3, keep=4)
    assert len(merged) == 3 and sum(b.count for b in merged) == 18
    assert merged[keep - 1].hi == 4 and merged[keep].lo == 4  # the line still sits at 4
    collapsed, keep = collapse_empty(
        [Bucket(i, i + 1, c) for i, c in enumerate([1, 0, 0, 0, 2])], 2
    )
    assert [b.count for b in collapsed] == [1, 0, 0, 2] and keep == 2


def test_histograms_sit_side_by_side_on_80_columns_and_stack_on_narrow_ones() -> None:
    f = frame()
    wide = histograms(f, 80, 10, UNICODE)
    assert wide[0].startswith("TTFT ") and " ITL " in wide[0]
    narrow = histograms(f, 50, 20, UNICODE)
    assert narrow[0].startswith("TTFT ") and any(line.startswith("ITL ") for line in narrow)
    tiny = histograms(f, 50, 3, UNICODE)  # no room for a bucket row: percentiles only
    assert tiny[0].startswith("TTFT p50 ") and tiny[1].startswith("ITL p50 ")


def test_a_dumb_terminal_gets_no_control_codes() -> None:
    out = io.StringIO()
    assert is_dumb(out, {"TERM": "xterm"})  # not a terminal
    tty = type("Tty", (io.StringIO,), {"isatty": lambda self: True})()
    assert is_dumb(tty, {"TERM": "dumb"}) and is_dumb(tty, {})
    assert not is_dumb(tty, {"TERM": "xterm-256color"})
    assert isinstance(screen_for(out), PlainText)
    with screen_for(out) as screen:
        width, height = screen.size()
        screen.draw(render(busy_view(keys=False), width, height, ASCII))
    text = out.getvalue()
    assert "\x1b" not in text and "SLO attainment" in text and "q quit" not in text
    assert text.isascii()


def test_the_full_screen_writes_only_the_lines_that_changed() -> None:
    out = io.StringIO()
    screen = FullScreen(out)
    screen.draw(["one", "two"])
    out.truncate(0), out.seek(0)
    screen.draw(["one", "TWO"])
    assert out.getvalue() == "\x1b[2;1H\x1b[2KTWO"


def test_keys_and_clipping() -> None:
    assert split_keys("q") == ["q"]
    assert split_keys("1\x1b[C\x1b[D\tn") == ["1", "n", "p", "n", "n"]
    assert clip("abcdef", 4, UNICODE) == "abc…" and clip("abc   ", 3) == "abc"
    assert (
        glyphs_for("UTF-8") is UNICODE
        and glyphs_for("ascii") is ASCII
        and glyphs_for(None) is ASCII
    )
    assert re.fullmatch(r"\d\d:\d\d:\d\d", event_time("2026-12-01T16:58:01.499630Z"))
    assert event_time("yesterday") == "--:--:--"


def test_a_sparse_frame_from_another_version_still_draws() -> None:
    for sparse in ({"type": "frame"}, {"type": "frame", "ttft": {"buckets": None}, "kv": None}):
        lines = render(View("mori", "5m", sparse), 80, 24)
        assert len(lines) == 24 and "SLO attainment -" in "\n".join(lines)


def test_events_are_newest_first_and_only_as_many_as_fit() -> None:
    lines = render(View("mori", "1m", frame(), events(9)), 80, None)
    shown = [line for line in lines if "event number" in line]
    assert [s.rsplit(" ", 1)[1] for s in shown] == ["9", "8", "7", "6", "5", "4"]


def test_a_narrow_screen_wraps_the_headline_and_leaves_no_row_unused() -> None:
    lines = render(busy_view(), 50, 20, UNICODE)
    assert lines[1:4] == [
        "SLO attainment 98.5%   Rejected 0%",
        "  Goodput 7.90/s   Request rate 8.00/s",
        "  TTFT ≤ 200 ms, ITL p99 ≤ 50 ms",
    ]
    assert "" not in lines  # the rows the compact histograms left went to the events
    assert lines[-1].startswith("keys: ")
