"""Each rule fires on a case that should trigger it, not on one that should not, and says
so when its signal is missing."""

import pytest

from observe.advice.advisor import RULES, advise

BASE = {
    "canary_failing_pairs": 0,
    "slo_ttft_ms": 1000,
    "slo_itl_ms": 50,
    "ttft_p99_ms": 400,
    "itl_p99_ms": 35,
    "spike_prefill_overlap": 0.1,
    "prompt_tokens_mean": 1000,
    "concurrency_mean": 8,
    "kv_transfer_gbps": 40,
    "transfer_share_of_ttft": 0.05,
    "multi_turn_share": 0.0,
    "frontend_cpu_share": 0.2,
    "request_rate": 4.0,
    "burstiness": 1.0,
    "prefix_hit_rate": 0.05,
    "topology": "colocated",
    "pd_recomputing_decodes": 0,
}

CASES = {
    "itl_interference": {"itl_p99_ms": 150, "spike_prefill_overlap": 0.9},
    "ttft_binding": {"ttft_p99_ms": 1500},
    "itl_binding": {"itl_p99_ms": 150, "topology": "disaggregated"},
    "long_prompts_high_concurrency": {"prompt_tokens_mean": 4000, "concurrency_mean": 64},
    "multi_turn": {"multi_turn_share": 0.6},
    "frontend_cpu": {"frontend_cpu_share": 0.95},
    "slow_kv_transfer": {"transfer_share_of_ttft": 0.5},
    "light_traffic": {"request_rate": 0.2},
    "prefix_cache_heavy": {"prefix_hit_rate": 0.8},
    "pd_not_happening": {"pd_recomputing_decodes": 1, "pd_transfer_share": 0.0},
    "canary_failing": {"canary_failing_pairs": 1},
}


def verdict(signals, rule):
    return next(v for v in advise(signals) if v.rule == rule)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_its_case_and_not_on_the_base(rule):
    assert verdict({**BASE, **CASES[rule]}, rule).triggered is True
    assert verdict(BASE, rule).triggered is False


def test_every_rule_has_a_case():
    assert {r.name for r in RULES} == set(CASES)


def test_spikes_not_caused_by_prefill_do_not_trigger_disaggregation():
    v = verdict({**BASE, "itl_p99_ms": 150, "spike_prefill_overlap": 0.1}, "itl_interference")
    assert v.triggered is False


def test_long_prompts_over_a_slow_link_advise_fixing_the_link():
    v = verdict(
        {**BASE, "prompt_tokens_mean": 4000, "concurrency_mean": 64, "kv_transfer_gbps": 1},
        "long_prompts_high_concurrency",
    )
    assert v.triggered is False and "fix the link" in v.advice


def test_bursty_arrivals_mean_light_traffic_and_the_verdict_lists_what_it_read():
    v = verdict({**BASE, "burstiness": 0.3}, "light_traffic")
    assert v.triggered is True and v.advice.startswith("bursty arrivals")
    assert v.signals == ("request_rate", "prompt_tokens_mean", "burstiness")
    assert verdict({**BASE, "burstiness": 0.6}, "light_traffic").triggered is False
    unknown = {k: v for k, v in BASE.items() if k != "burstiness"}  # read as Poisson
    assert verdict(unknown, "light_traffic").triggered is False


def test_missing_signals_are_reported_not_guessed():
    verdicts = advise({})
    assert all(v.triggered is None and v.advice.startswith("no signal") for v in verdicts)
    v = verdict({"prefix_hit_rate": 0.9}, "prefix_cache_heavy")
    assert v.triggered is True and v.evidence == {"prefix_hit_rate": 0.9}
    assert v.to_json()["signals"] == ["prefix_hit_rate"]


def test_pd_not_happening_puts_failing_transfers_first_only_when_some_failed():
    case = {**BASE, "topology": "disaggregated", "pd_recomputing_decodes": 1}
    quiet = verdict({**case, "pd_failed_transfers": 0}, "pd_not_happening")
    assert quiet.triggered and quiet.advice.index("(1) the decode's kv-transfer-config") > 0
    assert "no KVConnector found" in quiet.advice and "expired" in quiet.advice
    assert "(4) transfers fail and fall back to recompute (none counted" in quiet.advice
    failing = verdict({**case, "pd_failed_transfers": 7}, "pd_not_happening")
    assert "(1) transfers fail and fall back to recompute (7 failed" in failing.advice


def test_a_failing_canary_says_attainment_overstates_and_a_passing_one_stays_quiet():
    bad = verdict({"canary_failing_pairs": 1}, "canary_failing")
    assert bad.triggered is True and "attainment and goodput overstate" in bad.advice
    assert verdict({"canary_failing_pairs": 0}, "canary_failing").triggered is False


def test_itl_binding_is_about_disaggregated_decodes_only():
    slow = {**BASE, "itl_p99_ms": 150}
    assert verdict(slow, "itl_binding").triggered is False  # colocated: interference's case
    both = {**slow, "topology": "disaggregated", "ttft_p99_ms": 1500}
    assert verdict(both, "itl_binding").triggered is False  # both missed: not ITL alone
    hit = verdict({**slow, "topology": "disaggregated"}, "itl_binding")
    assert "prefill to decode" in hit.advice


def test_ttft_binding_advice_follows_the_topology():
    slow = {**BASE, "ttft_p99_ms": 1500}
    assert "stay colocated" in verdict(slow, "ttft_binding").advice
    disagg = verdict({**slow, "topology": "disaggregated"}, "ttft_binding")
    assert disagg.triggered and "decode to prefill" in disagg.advice


@pytest.mark.parametrize(
    ("prompt", "output", "fires"), [(8000, 16, True), (4000, 128, False), (256, 1024, False)]
)
def test_a_hot_frontend_gets_a_render_tier_only_where_the_prompt_side_is_worth_it(
    prompt, output, fires
):
    """vLLM's measured costs (domain/engine/frontend_cost.py): the prompt side is 77%, 22% and
    0%."""
    signals = {**BASE, "frontend_cpu_share": 0.95}
    v = verdict(
        {**signals, "prompt_tokens_mean": prompt, "output_tokens_mean": output}, "frontend_cpu"
    )
    assert v.triggered is fires
    assert "output_tokens_mean" in v.signals and "prompt_side_share" in v.evidence
    assert v.evidence["render_load_share"] > v.evidence["prompt_side_share"]
    if not fires:
        assert "--api-server-count" in v.advice and "mostly streaming" in v.advice
    # without the answer length the rule cannot weigh it, and goes by the frontend alone
    assert verdict(signals, "frontend_cpu").triggered is True
