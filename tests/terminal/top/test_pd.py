"""`pdctl top`'s "is PD happening?" line, from the frame's `pd` section, on an 80x24 screen."""

from __future__ import annotations

from terminal.top.format import ASCII
from terminal.top.view import View, pd_line, render

RULE = {"window": "10s"}


def frame(pd: dict) -> dict:
    instances = [
        {"name": n, "role": r, "state": "RUNNING", "up": True, "running": 1, "waiting": 0}
        for n, r in (("prefill-0", "prefill"), ("decode-0", "decode"), ("decode-1", "decode"))
    ]
    return {
        "deployment": "pd",
        "window": "1m",
        "simulated": True,
        "slo": {"ttft_ms": 1000, "itl_ms": 50, "itl_stat": "p99"},
        "kv": {"bytes_per_s": 1e9, "source": "moriio", "xfer_p50_ms": 4.0, "xfer_p99_ms": 9.0},
        "instances": instances,
        "proxy": {"up": True, "in_flight": 2, "held": 0},
        "pd": pd,
    }


def decode(name: str, status: str, share: float | None, since: float | None = None) -> dict:
    return {"instance": name, "status": status, "share": share, "since": since}


def line(pd: dict) -> str:
    return pd_line(View("pd", "1m", frame(pd)), 80, 1, ASCII)[0]


def test_a_recomputing_decode_is_named_with_when_it_began():
    pd = {
        "applies": True,
        "why": None,
        "rule": RULE,
        "decodes": [decode("decode-0", "ok", 0.99), decode("decode-1", "recomputing", 0.0, 0.0)],
        "recomputing": ["decode-1"],
    }
    text = line(pd)
    assert text.startswith("PD NOT HAPPENING  decode-1 recomputes since ")
    assert "(0% by KV)" in text and "decode-0" not in text
    screen = render(View("pd", "1m", frame(pd), status="live"), 80, 24)
    assert len(screen) == 24 and all(len(row) <= 80 for row in screen)
    assert any(row.startswith("PD NOT HAPPENING") for row in screen)


def test_healthy_decodes_show_their_share_and_colocated_says_it_does_not_apply():
    pd = {
        "applies": True,
        "why": None,
        "rule": RULE,
        "decodes": [decode("decode-0", "ok", 0.995), decode("decode-1", "idle", None)],
        "recomputing": [],
    }
    assert line(pd) == (
        "PD happening  decode-0 100%, decode-1 idle  (prompt tokens by KV transfer, 10 s)"
    )
    colocated = {
        "applies": False,
        "why": "colocated: no KV hand-off, each instance computes its own prompts",
        "rule": RULE,
        "decodes": [],
        "recomputing": [],
    }
    assert line(colocated).startswith("PD check  does not apply (colocated: no KV hand-off")
    assert "NOT" not in line(colocated)


def test_the_autopilots_line_shows_when_the_frame_carries_it_and_not_otherwise():
    healthy = {"applies": True, "why": None, "rule": RULE, "decodes": [], "recomputing": []}
    moved = "autopilot: on, last move decode-1 decode -> prefill, revision 3: TTFT-bound"
    with_pilot = {**frame(healthy), "autopilot": {"mode": "on", "line": moved}}
    screen = render(View("pd", "1m", with_pilot, status="live"), 80, 24)
    assert len(screen) == 24 and all(len(row) <= 80 for row in screen)
    assert any(row.startswith("autopilot: on, last move decode-1") for row in screen), screen
    plain = render(View("pd", "1m", frame(healthy), status="live"), 80, 24)
    assert not any(row.startswith("autopilot") for row in plain)
