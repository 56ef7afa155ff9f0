"""`pdctl show` after a runtime role move: an instance's row sits under the role it serves
(role_switch.serving), its role cell and a note under the table say it moved."""

from __future__ import annotations

from terminal import views
from terminal.serving_roles import by_serving_role, moved, moved_notes

SPEC = {
    "engine": "sim",
    "model": "tiny",
    "topology": "disaggregated",
    "connector": "NixlConnector",
    "groups": [
        {"name": "prefill", "role": "prefill"},
        {"name": "decode", "role": "decode", "count": 2},
    ],
    "role_switch": {"serving": {"decode-1": "prefill"}},
}


def unit(name: str, role: str) -> dict:
    return {"name": name, "role": role, "mode": None, "state": "RUNNING", "health": True}


UNITS = [  # the API's order: by group
    unit("proxy", "proxy"),
    unit("prefill-0", "prefill"),
    unit("decode-0", "decode"),
    unit("decode-1", "prefill"),
]


def test_only_instances_serving_another_role_than_their_group_s_are_moved() -> None:
    assert moved(SPEC) == {"decode-1": "prefill"}
    back = {**SPEC, "role_switch": {"serving": {"decode-1": "decode"}}}  # moved back
    assert moved(back) == {} and moved({**SPEC, "role_switch": None}) == {}


def test_rows_are_grouped_by_the_role_served_and_the_moved_one_marked() -> None:
    rows = by_serving_role(UNITS, SPEC)
    assert [(r["name"], r["role"]) for r in rows] == [
        ("proxy", "proxy"),
        ("prefill-0", "prefill"),
        ("decode-1", "prefill (moved)"),
        ("decode-0", "decode"),
    ]
    assert by_serving_role(UNITS[:3], {**SPEC, "role_switch": None}) == UNITS[:3]


def test_show_draws_decode_1_under_prefill_and_says_why() -> None:
    d = {
        "name": "rs",
        "revision": 3,
        "state": "applied",
        "actor": "alice",
        "spec": SPEC,
        "ports": {"proxy": 8000, "registry": 8001},
    }
    text = views.deployment(d, UNITS)
    lines = text.splitlines()
    order = [
        next(i for i, line in enumerate(lines) if line.startswith(n))
        for n in ("prefill-0", "decode-1", "decode-0")
    ]
    assert order == sorted(order)
    assert "prefill (moved)" in lines[order[1]]
    assert lines[-1] == "decode-1 serves prefill (moved from its group decode, decode)"
    assert moved_notes({**SPEC, "role_switch": {}}) == []
