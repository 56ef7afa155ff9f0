"""Which instances serve whole requests after a takeover (controller/rollout/routing.py)."""

from __future__ import annotations

from typing import Any

from controller.rollout.routing import whole_needed

P0, P1, D0, D1 = (f"http://127.0.0.1:{p}" for p in (1, 2, 3, 4))


def entry(url: str, role: str, group: str, **more: Any) -> Any:
    return {"url": url, "role": role, "group": group, "healthy": True, "draining": False, **more}


def test_prefills_and_decodes_split_across_modes_all_serve_whole():
    split = [entry(P0, "prefill", "read"), entry(P1, "prefill", "read")]
    split += [entry(D0, "decode", "write"), entry(D1, "decode", "write")]
    assert whole_needed(split, {P0, P1, D0, D1}) == [P0, P1, D0, D1]


def test_a_group_with_a_prefill_and_a_decode_needs_no_whole_requests():
    paired = [entry(P0, "prefill", "read"), entry(D0, "decode", "read")]
    paired += [entry(P1, "prefill", "write")]
    assert whole_needed(paired, {P0, P1, D0}) == []
    assert whole_needed([entry(P0, "both", "colocated")], {P0}) == []


def test_a_pair_that_is_not_available_does_not_count():
    for unavailable in ({"healthy": False}, {"draining": True}):
        entries = [entry(P0, "prefill", "read"), entry(D0, "decode", "read", **unavailable)]
        entries += [entry(D1, "decode", "write")]
        assert whole_needed(entries, {P0, D0, D1}) == [P0, D1]
    # listed but not running (its URL kept from before): neither paired nor made whole
    entries = [entry(P0, "prefill", "read"), entry(D0, "decode", "read")]
    assert whole_needed(entries, {P0}) == [P0]


def test_nothing_available_needs_nothing():
    assert whole_needed([], set()) == []
    assert whole_needed([entry(P0, "prefill", "read")], set()) == []
