"""The "is PD happening?" rule: the share of a decode's prompt tokens that arrived by KV
transfer, onset below 0.5 with traffic, recovery at 0.8, one transition each way."""

from __future__ import annotations

import pytest

from observe.metrics.samples import parse
from observe.metrics.windows import Delta, Snapshots, advance
from observe.sections.pd_check import (
    COLOCATED_WHY,
    DecodeState,
    Reading,
    check,
    reading,
    step,
)
from tests.observe.series import engine_text

HEALTHY = Reading(external=1990, local_compute=10, requests=10)
RECOMPUTING = Reading(external=0, local_compute=2000, requests=10)


def delta(before: str, after: str) -> Delta:
    track, snaps = None, Snapshots()
    for ts, text in ((0.0, before), (10.0, after)):
        track = advance(track, parse(text).counters)
        snaps.add(ts, track.totals)
    return snaps.delta(10)


def test_a_healthy_decode_is_ok_and_silent():
    state, status, moved = step("decode-0", DecodeState(), HEALTHY, 10.0)
    assert (state, status, moved) == (DecodeState(), "ok", None)


def test_collapse_with_traffic_fires_once_and_recovery_once():
    state, status, moved = step("decode-0", DecodeState(), RECOMPUTING, 10.0)
    assert status == "recomputing" and state == DecodeState(True, 10.0)
    assert moved is not None and moved.kind == "pd.recomputing"
    assert "decode-0 recomputes" in moved.message and moved.detail["share"] == 0.0
    again, status, moved = step("decode-0", state, RECOMPUTING, 11.0)
    assert (again, status, moved) == (state, "recomputing", None)  # once per onset
    back, status, moved = step("decode-0", state, HEALTHY, 40.0)
    assert status == "ok" and back == DecodeState(False, 40.0)
    assert moved is not None and moved.kind == "pd.recovered"
    assert "after 30 s" in moved.message and moved.detail["since"] == 10.0


def test_hysteresis_holds_the_verdict_between_the_lines():
    middling = Reading(external=650, local_compute=350, requests=10)  # 65%
    assert step("d", DecodeState(), middling, 1.0)[1:] == ("ok", None)
    assert step("d", DecodeState(True, 0.0), middling, 1.0)[1:] == ("recomputing", None)
    just_below = Reading(external=490, local_compute=510, requests=10)
    assert step("d", DecodeState(), just_below, 1.0)[1] == "recomputing"


@pytest.mark.parametrize(
    "r",
    [
        Reading(external=0, local_compute=2000, requests=2),  # too few requests
        Reading(external=0, local_compute=40, requests=10),  # too few tokens
        Reading(external=0, local_compute=0, requests=0),  # idle
        Reading(external=40, local_compute=40, requests=40),  # 2-token prompts: cannot tell
    ],
)
def test_too_little_traffic_is_not_judged_and_the_verdict_stands(r):
    assert step("d", DecodeState(), r, 1.0)[1:] == ("idle", None)
    assert step("d", DecodeState(True, 0.0), r, 1.0)[1:] == ("recomputing", None)


def test_prefix_cache_hits_are_not_recomputation():
    cached = Reading(external=500, local_compute=10, cache_hit=1500, requests=10)
    assert cached.share == pytest.approx(500 / 510)
    assert step("d", DecodeState(), cached, 1.0)[1] == "ok"


def test_no_by_source_counter_is_unmeasured_and_a_down_decode_keeps_its_verdict():
    assert step("d", DecodeState(), Reading(external=None), 1.0)[1] == "unmeasured"
    assert step("d", DecodeState(), None, 1.0)[1] == "down"
    assert step("d", DecodeState(True, 0.0), None, 1.0)[1] == "recomputing"


def test_reading_takes_sources_requests_and_failed_transfers_from_the_window():
    before = engine_text(local_tokens=0, first_tokens=0, failed_transfers=0, connector="moriio")
    counts = {"local_tokens": 3000, "cache_hit_tokens": 100, "first_tokens": 6}
    after = engine_text(**counts, failed_transfers=6, connector="moriio")
    r = reading(delta(before, after))
    assert r == Reading(0.0, 3000.0, 100.0, 6.0, 6.0)


def test_check_names_the_recomputing_decodes_and_skips_colocated():
    states, section, moved = check(
        False,
        [("decode-0", delta(engine_text(), engine_text(local_tokens=2005, first_tokens=5)))],
        {},
        10.0,
    )
    assert section["applies"] and section["recomputing"] == ["decode-0"]
    row = section["decodes"][0]
    assert row["status"] == "recomputing" and row["since"] == 10.0 and row["share"] == 0.0
    assert [t.kind for t in moved] == ["pd.recomputing"] and states["decode-0"].recomputing
    states, section, moved = check(True, [], {}, 10.0)
    assert (states, moved) == ({}, []) and section["applies"] is False
    assert section["why"] == COLOCATED_WHY


def test_a_mode_switch_pauses_the_onset_but_not_the_recovery():
    assert step("d", DecodeState(), RECOMPUTING, 1.0, paused=True)[1:] == ("paused", None)
    _, status, moved = step("d", DecodeState(True, 0.0), HEALTHY, 5.0, paused=True)
    assert status == "ok" and moved is not None and moved.kind == "pd.recovered"
    _, section, moved = check(
        False,
        [("d", delta(engine_text(), engine_text(local_tokens=2005, first_tokens=5)))],
        {},
        10.0,
        paused="a mode switch (keep-serving) runs or just ended: no onset judged",
    )
    assert moved == [] and section["recomputing"] == [] and "keep-serving" in section["why"]
