"""The advisor decides nothing from a window that is no evidence: an idle deployment whose only
requests are pdctl's canaries, or the minute after a switch, a role move or a restart. Once
real traffic fills a clean window, it proposes again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from controller import propose
from observe.advice.signals import advice, from_frame
from observe.sections.evidence import judge, marks
from tests.observe.advice.test_signals import KV_PER_TOKEN, frame, hist, verdict
from tests.specs import nixl_1p1d

NOW = 1000.0
TRAFFIC_RULES = ("light_traffic", "ttft_binding", "itl_binding", "itl_interference")


def change(kind: str, ended_ago: float | None) -> list:
    r = SimpleNamespace(
        id="4",
        kind=kind,
        strategy="hold",
        state="running" if ended_ago is None else "done",
        started_at=NOW - 20.0,
        ended_at=None if ended_ago is None else NOW - ended_ago,
    )
    return marks([r], NOW, 400.0)


def idle_frame() -> dict:
    """What an idle demo showed: no client request, the canary's short prompts on the
    engines (request_rate 0, prompts of 24 tokens): light_traffic said YES, colocate."""
    return frame(
        ttft=hist(0, None, None),
        itl=hist(0, None, None),
        request_rate=0.0,
        slo_attainment=None,
        engines={"prompt_tokens_per_request": 24.0, "output_tokens_per_request": 8.0},
        evidence=judge(0, [], "1m", 60.0, NOW),
    )


def ttft_bound(evidence: dict) -> dict:
    """TTFT p99 1.5 s over its 1 s target, ITL fine: what a hold's held requests look like."""
    return frame(ttft=hist(240, 0.4, 1.5), evidence=evidence)


def live(f: dict) -> dict:
    return advice(from_frame(f, topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN))


def proposals(result: dict) -> list:
    spec = nixl_1p1d_spec()
    return [
        c
        for v in result["verdicts"]
        if v["triggered"] and (c := propose(spec, v["rule"], v["evidence"])) is not None
    ]


def nixl_1p1d_spec():
    from controller import DeploymentSpec

    return DeploymentSpec.model_validate(nixl_1p1d())


def test_an_idle_deployment_with_only_canaries_proposes_nothing_and_says_why():
    result = live(idle_frame())
    why = result["not_enough_evidence"]
    assert why.startswith("not enough evidence (no real traffic: 0 real request(s)")
    light = verdict(result, "light_traffic")
    assert light["triggered"] is None and light["advice"] == why
    assert light["not_enough_evidence"] == why
    assert light["evidence"]["request_rate"] == 0.0  # the numbers still show
    assert proposals(result) == []


def test_without_the_gate_the_idle_window_would_have_said_colocate():
    """The bug as it was: the same idle frame, unmarked, triggers light_traffic."""
    unmarked = idle_frame()
    del unmarked["evidence"]
    assert verdict(live(unmarked), "light_traffic")["triggered"] is True


@pytest.mark.parametrize("kind", ["switch", "role_move", "restart", "apply"])
@pytest.mark.parametrize("ended_ago", [None, 1.0, 45.0, 69.0])
def test_no_proposal_in_the_minute_after_a_change(kind, ended_ago):
    result = live(ttft_bound(judge(240, change(kind, ended_ago), "1m", 60.0, NOW)))
    assert result["not_enough_evidence"] and "measures the change" in result["not_enough_evidence"]
    for rule in TRAFFIC_RULES:
        assert verdict(result, rule)["triggered"] is None
    assert proposals(result) == []


def test_a_proposal_again_once_real_traffic_fills_a_clean_window():
    after = live(ttft_bound(judge(240, change("switch", 71.0), "1m", 60.0, NOW)))
    assert after["not_enough_evidence"] is None
    assert verdict(after, "ttft_binding")["triggered"] is True
    assert [c.rule for c in proposals(after)] == ["ttft_binding"]


def test_a_trickle_of_real_requests_is_not_enough():
    result = live(ttft_bound(judge(7, [], "1m", 60.0, NOW)))
    assert "7 real request(s) in the 1m window, 20 needed" in result["not_enough_evidence"]
    assert verdict(result, "ttft_binding")["triggered"] is None


def test_the_correctness_rules_keep_judging_in_a_disturbed_window():
    """PD not happening and the canary have their own evidence rules (the PD check's grace
    after any rollout, the canary's own probes): they are not silenced here."""
    pd = {
        "applies": True,
        "why": None,
        "rule": {},
        "decodes": [
            {"instance": "decode-0", "status": "recomputing", "share": 0.1, "failed_transfers": 0}
        ],
        "recomputing": ["decode-0"],
    }
    result = live(frame(pd=pd, evidence=judge(0, [], "1m", 60.0, NOW)))
    assert verdict(result, "pd_not_happening")["triggered"] is True
