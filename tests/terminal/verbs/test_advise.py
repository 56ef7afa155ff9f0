"""`pdctl advise`: the verdicts and the proposed changes with their forecasts, `--apply RULE`
sending the rule with the revision it read, and a bad --window refused before anything is
sent (tests/web/routes/advise/test_proposals_api.py covers the API it calls;
tests/e2e/rollout/test_proposals.py applies proposals on running stand-ins)."""

from __future__ import annotations

from typing import Any

import typer
from typer.testing import CliRunner

from terminal import exits
from terminal.verbs import advise as advise_verb
from terminal.verbs import cli as verbs_cli

PROPOSAL = {
    "rule": "ttft_binding",
    "summary": "move decode-1 from decode to prefill (runtime role switch)",
    "how": "role_move",
    "disruption": "decode-1 drains its legs, then serves prefill; no restart",
    "watch": {"signal": "ttft_p99_ms", "direction": "down"},
    "forecast": {
        "source": "planner",
        "workload": {"num_prompts": 60, "input_len": 2000, "output_len": 64, "rate": 4.0},
        "now": {"config": "2P-TP1+2D-TP1 read"},
        "after": {"config": "3P-TP1+1D-TP1 read"},
        "predicted": {"now": 150.9, "after": 118.4, "direction": "down", "agrees": True},
    },
}
ADVICE = {
    "deployment": "flip",
    "window": "1m",
    "live": True,
    "verdicts": [
        {"rule": rule, "triggered": False, "advice": "-", "evidence": {}}
        for rule in ("ttft_binding", "light_traffic")
    ],
}


class FakeApi:
    timeout_s = 30.0

    def __init__(self, proposals: list[dict]) -> None:
        self.proposals, self.sent = proposals, []

    def get(self, path: str, **query: Any) -> Any:
        if path.endswith("/proposals"):
            return {"revision": 7, "proposals": self.proposals}
        return ADVICE

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        self.sent.append((path, body))
        return {**PROPOSAL, "revision": 8, "move": {"revision": 8}}


def run(monkeypatch, api: FakeApi, *args: str) -> Any:
    app = typer.Typer()
    verbs_cli.register(app)
    monkeypatch.setattr(advise_verb, "client", lambda server: api)
    return CliRunner().invoke(app, list(args))


def test_advise_shows_each_proposal_with_its_forecast_and_how_to_apply_it(monkeypatch):
    out = run(monkeypatch, FakeApi([PROPOSAL]), "advise", "flip")
    assert out.exit_code == 0, out.output
    assert "proposed changes (from revision 7):" in out.output
    assert "ttft_binding: move decode-1 from decode to prefill" in out.output
    assert "ttft_p99_ms 150.9 -> 118.4 (down, as proposed)" in out.output
    assert "2P-TP1+2D-TP1 read -> 3P-TP1+1D-TP1 read" in out.output
    assert "apply: pdctl advise flip --apply ttft_binding" in out.output


def test_a_forecast_the_planner_cannot_make_says_why(monkeypatch):
    unmodelled = {
        **PROPOSAL,
        "watch": {"signal": "prompt_saved_share", "direction": "up"},
        "forecast": {"source": None, "why": "the planner does not model multi-turn KV reuse"},
    }
    out = run(monkeypatch, FakeApi([unmodelled]), "advise", "flip")
    assert "prompt_saved_share should go up (the planner does not model" in out.output
    assert "no change proposed" in run(monkeypatch, FakeApi([]), "advise", "flip").output


def test_apply_sends_the_rule_with_the_revision_it_read(monkeypatch):
    api = FakeApi([PROPOSAL])
    out = run(monkeypatch, api, "advise", "flip", "--apply", "ttft_binding", "--reason", "p99")
    assert out.exit_code == 0, out.output
    assert api.sent == [
        (
            "/api/deployments/flip/proposals/apply",
            {"rule": "ttft_binding", "revision": 7, "window": "1m", "reason": "p99"},
        )
    ]
    assert "flip: applied ttft_binding (role_move)" in out.output and "revision 8" in out.output
    assert api.timeout_s >= 600  # a role move's drain outlasts the default


def test_a_bad_window_is_a_usage_error_before_anything_is_sent(monkeypatch):
    api = FakeApi([PROPOSAL])
    out = run(monkeypatch, api, "advise", "flip", "--window", "2h", "--apply", "ttft_binding")
    assert out.exit_code == exits.USAGE and api.sent == []
    assert "--window '2h'" in out.output


IDLE_WHY = (
    "not enough evidence (no real traffic: 0 real request(s) in the 1m window, 20 needed; "
    "pdctl's own canaries and probes are not traffic)"
)


class IdleApi(FakeApi):
    def get(self, path: str, **query: Any) -> Any:
        if path.endswith("/proposals"):
            return {"revision": 7, "proposals": [], "not_enough_evidence": IDLE_WHY}
        light = {
            "rule": "light_traffic",
            "triggered": None,
            "advice": IDLE_WHY,
            "evidence": {"request_rate": 0.0},
            "not_enough_evidence": IDLE_WHY,
        }
        return {**ADVICE, "not_enough_evidence": IDLE_WHY, "verdicts": [light]}


def test_an_idle_deployment_says_not_enough_evidence_and_proposes_nothing(monkeypatch):
    out = run(monkeypatch, IdleApi([]), "advise", "flip")
    assert out.exit_code == 0, out.output
    assert f"  {IDLE_WHY}: no rule that reads the traffic decides" in out.output
    assert "[  -] light_traffic: not enough evidence" in out.output
    assert "[YES]" not in out.output
    assert f"no change proposed: {IDLE_WHY}" in out.output


def test_a_proposal_reads_its_changes_in_words_and_its_forecast_from_the_measured_figure(
    monkeypatch,
):
    colocate = {
        **PROPOSAL,
        "rule": "light_traffic",
        "how": "revision",
        "disruption": "by recreate (the proxy restarts, so nothing can keep serving through it)",
        "changes_text": ["group decode removed (role decode, count 1, tp 1)"],
        "forecast": {
            **PROPOSAL["forecast"],
            "predicted": {
                "now": 37.0,
                "after": 20.0,
                "direction": "down",
                "agrees": True,
                "now_measured": 64.8,
                "baseline": 64.8,
                "expected": 35.03,
                "baseline_note": "the planner puts the layout that runs now at 37 where 64.8",
            },
        },
    }
    out = run(monkeypatch, FakeApi([colocate]), "advise", "flip").output
    assert "    change: group decode removed (role decode, count 1, tp 1)" in out
    assert "{'" not in out
    assert "how: revision; by recreate (the proxy restarts" in out
    assert "ttft_p99_ms 64.8 measured -> ~35.03 (the planner: 37 -> 20, down, as proposed)" in out
    assert "    baseline: the planner puts the layout that runs now at 37 where 64.8" in out


def test_an_unknown_rule_is_a_usage_error_naming_the_closest(monkeypatch):
    api = FakeApi([PROPOSAL])
    out = run(monkeypatch, api, "advise", "flip", "--apply", "light_trafic")
    assert out.exit_code == exits.USAGE and api.sent == []
    assert (
        "pdctl advise: error: --apply 'light_trafic': unknown rule (did you mean "
        "'light_traffic'?); the rules: ttft_binding, light_traffic"
    ) in out.output
    far = run(monkeypatch, api, "advise", "flip", "--apply", "zzz")
    assert far.exit_code == exits.USAGE and "unknown rule; the rules:" in far.output
