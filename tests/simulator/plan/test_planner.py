import itertools
import json

import pytest
import typer
from typer.testing import CliRunner

from simulator.plan import cli as plan_cli
from simulator.plan.cluster import RequestResult
from simulator.plan.planner import (
    EngineFlags,
    PlanConfig,
    PlanError,
    PlanSetup,
    Workload,
    candidate_configs,
    parse_config,
    run,
    search,
)
from simulator.plan.scenarios import checks, itl_clusters, mori_io_qwen3_235b, saturation_scenario


def test_config_grammar():
    assert parse_config("2xtp4") == PlanConfig("colocated", count=2, tp=4)
    pd = parse_config("1p-tp4+1d-tp4:read")
    assert (pd.prefills, pd.prefill_tp, pd.decodes, pd.decode_tp, pd.mode) == (1, 4, 1, 4, "read")
    assert parse_config("2ptp2+1dtp4").mode == "write"
    assert pd.gpus == 8 and pd.label == "1P-TP4+1D-TP4 read"


@pytest.mark.parametrize("bad", ["tp8", "2x", "1p-tp4", "0xtp8", "1p-tp4+0d-tp4", "1p+1d"])
def test_bad_configs_name_the_option(bad):
    with pytest.raises(PlanError, match="--config"):
        parse_config(bad)


def test_config_that_needs_more_gpus_or_memory_is_refused():
    setup = PlanSetup("llama-3.1-70b", "h100", gpus=4)
    with pytest.raises(PlanError, match="needs 8 GPUs"):
        setup.check(parse_config("2xtp4"))
    with pytest.raises(PlanError, match="does not fit"):
        setup.check(parse_config("4xtp1"))


def test_candidates_cover_every_one_node_split():
    labels = {c.label for c in candidate_configs(8, ("write",))}
    assert {"1xTP8", "2xTP4", "8xTP1", "1P-TP4+1D-TP4 write", "2P-TP2+1D-TP4 write"} <= labels
    assert all(c.gpus == 8 for c in candidate_configs(8))


def test_rows_carry_the_promised_fields():
    setup = PlanSetup("llama-3.1-8b", "h100", gpus=2)
    r = run(setup, parse_config("1p-tp1+1d-tp1:write"), Workload(20, 500, 50), 4.0)
    for key in (
        "config",
        "rate",
        "requests",
        "met_ttft",
        "met_itl",
        "met_both",
        "p50_ttft_ms",
        "p99_ttft_ms",
        "p50_itl_ms",
        "p99_itl_ms",
    ):
        assert key in r
    assert r["requests"] == 20


def test_mori_io_scenario_holds_every_published_claim():
    result = mori_io_qwen3_235b(rates=[8.0], seeds=20)
    failing = [c["claim"] for c in result["checks"] if not c["holds"]]
    assert not failing
    assert len(result["checks"]) == 7  # order, two ITL-free modes, four counts within 10
    configs = result["published_rate"]["configs"]
    assert list(configs) == ["colocated-tp8", "colocated-2xtp4", "disagg-read", "disagg-write"]
    for name in ("colocated-tp8", "colocated-2xtp4"):  # colocation misses on ITL
        assert configs[name]["fail_itl_only"]["mean"] > 60
        assert configs[name]["fail_ttft_only"]["mean"] <= 1
    for name in ("disagg-read", "disagg-write"):  # disaggregation misses on TTFT only
        assert configs[name]["fail_itl_only"]["max"] == 0
        assert configs[name]["fail_ttft_only"]["mean"] > 10
        assert configs[name]["seed0"]["itl_clusters"].startswith("100 at")
    # Under the per-request mean nearly every colocated request passes: why p99 is pinned.
    assert configs["colocated-2xtp4"]["met_both_by_itl_stat"]["mean"]["mean"] > 90
    assert {e["tp"] for e in result["calibration"]} == {"any", 8}


def test_checks_say_when_a_claim_fails():
    report = {
        "configs": {
            name: {
                "met_both": {"mean": mean},
                "fail_itl_only": {"max": 0},
                "published": {"met_both": 50},
            }
            for name, mean in (
                ("colocated-tp8", 10),
                ("colocated-2xtp4", 20),
                ("disagg-read", 45),
                ("disagg-write", 44),
            )
        }
    }
    holds = {c["claim"].split(":")[0]: c["holds"] for c in checks(report)}
    assert holds["write >= read > 2 x TP4 >= 1 x TP8 at 8 req/s (mean met both)"] is False
    assert holds["colocated-tp8"] is False and holds["disagg-read"] is True


def test_itl_clusters_group_neighbouring_values():
    def result(ms):
        return RequestResult("r", 0.0, 0.1, [(ms / 1000, 10)], 1.0, 11)

    text = itl_clusters([result(v) for v in (31, 33, 36, 150, 151, 153)], "p99")
    assert text == "3 at 31-36 ms; 3 at 150-153 ms"


def test_saturation_disaggregation_does_not_raise_throughput():
    result = saturation_scenario()
    best = {"colocated": 0.0, "split": 0.0}
    for r in result["saturation"]:
        kind = "split" if r["config"].startswith("disagg") else "colocated"
        best[kind] = max(best[kind], r["total_tokens_per_s"])
    assert best["split"] <= best["colocated"]


def test_search_ranks_layouts_and_explains_the_winner():
    setup = PlanSetup("llama-3.1-8b", "h100", gpus=2)
    result = search(setup, Workload(30, 1000, 100), [2.0, 8.0])
    assert (result["ranked"] and "req/s" in result["reason"]) or "no layout" in result["reason"]
    assert len({r["config"] for r in result["ranked"]}) == len(result["ranked"])


@pytest.fixture
def app():
    app = typer.Typer()
    plan_cli.register(app)
    return app


def test_cli_json_rows(app):
    out = CliRunner().invoke(
        app,
        [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "h100",
            "--gpus",
            "2",
            "--config",
            "2xtp1",
            "--rate",
            "1,4",
            "--num-prompts",
            "10",
            "--input-len",
            "300",
            "--output-len",
            "20",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [r["rate"] for r in doc["rows"]] == [1.0, 4.0]
    assert "calibration" in doc and "2xTP1" in doc["max_goodput_rate"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "fast"], "--rate"),
        (["--rate", "-1"], "--rate"),
        (["--config", "tp8"], "--config"),
        (["--model", "gpt-5"], "unknown models profile"),
        (["--range-ratio", "1.5"], "--range-ratio"),
        (["--scenario", "nope"], "--scenario"),
        (["--itl-slo-stat", "p50"], "--itl-slo-stat"),
    ],
)
def test_cli_errors_name_the_option(app, args, needle):
    out = CliRunner().invoke(app, ["plan", *args])
    assert out.exit_code == 2 and needle in out.output


def test_kv_calculator_llama70b_10k_tokens(app):
    out = CliRunner().invoke(
        app, ["kv", "--model", "llama-3.1-70b", "--tokens", "10000", "--hardware", "l40s", "--json"]
    )
    doc = json.loads(out.output)
    assert doc["kv_gb"] == 3.277
    assert doc["in_node_path"].startswith("through host")
    assert CliRunner().invoke(app, ["kv", "--tokens", "0"]).exit_code == 2


def test_kv_calculator_prints_the_hand_off_parts_per_path(app):
    out = CliRunner().invoke(app, ["kv", "--model", "llama-3.1-8b", "--tokens", "2048"])
    assert out.exit_code == 0
    for word in ("rdma", "p2p", "host", "post ms", "staging ms", "notice ms", "x bandwidth"):
        assert word in out.output
    doc = json.loads(
        CliRunner().invoke(app, ["kv", "--hardware", "l40s", "--block-size", "32", "--json"]).output
    )
    assert doc["block_size"] == 32 and doc["handoff"][0]["path"] == "host"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--connector", "ucx"], "--connector"),
        (["--block-size", "0"], "--block-size"),
        (["--decode-step-ms", "-5"], "--decode-step-ms"),
        (["--block-size", "many"], "--block-size"),
    ],
)
def test_kv_bad_flag_exits_2_naming_it(app, args, needle):
    out = CliRunner().invoke(app, ["kv", *args])
    assert out.exit_code == 2 and needle in out.output


def test_cli_scenario_json_names_the_configs_and_the_published_counts(app):
    out = CliRunner().invoke(
        app, ["plan", "--scenario", "mori-io-qwen3-235b", "--rate", "8", "--seeds", "2", "--json"]
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [r["config"] for r in doc["rows"]] == [
        "colocated-tp8",
        "colocated-2xtp4",
        "disagg-read",
        "disagg-write",
    ]
    assert [r["published"] for r in doc["rows"]] == [26, 29, 70, 73]
    assert doc["published_rate"]["seeds"] == 2 and doc["checks"]


def test_cli_scenario_seeds_out_of_range_is_an_error(app):
    out = CliRunner().invoke(app, ["plan", "--scenario", "mori-io-qwen3-235b", "--seeds", "0"])
    assert out.exit_code == 2 and "--seeds" in out.output


def test_a_plan_says_which_vllm_defaults_its_engines_took():
    setup = PlanSetup("llama-3.1-8b", "l40s", gpus=2)
    configs = [parse_config("2xtp1"), parse_config("1p-tp1+1d-tp1")]
    applied = setup.defaults_applied(configs)
    assert set(applied) == {"colocated TP1", "prefill TP1", "decode TP1"}
    assert "--max-num-batched-tokens 2048" in applied["colocated TP1"]
    engine = setup.engine(1, setup.colocated_flags)
    assert (engine.config.max_num_batched_tokens, engine.config.max_num_seqs) == (2048, 256)


def test_given_planner_flags_are_kept():
    setup = PlanSetup("llama-3.1-8b", "h100", colocated_flags=EngineFlags(64, 1024, False))
    engine = setup.engine(1, setup.colocated_flags)
    assert (engine.config.max_num_batched_tokens, engine.config.max_num_seqs) == (1024, 64)
    assert not engine.config.enable_prefix_caching


def test_the_planner_offers_requests_when_vllms_client_would():
    from domain.workload.vllm_arrivals import vllm_arrival_times
    from simulator.plan.planner import make_arrivals

    workload = Workload(num_prompts=100, input_len=16, output_len=4, seed=3)
    arrivals = make_arrivals(workload, 8.0)
    assert [a.at for a in arrivals] == vllm_arrival_times(100, 8.0, 1.0, 3)
    assert arrivals[-1].at == pytest.approx(100 / 8.0)  # every sequence offers the rate


def test_mean_attainment_over_seeds_declines_steadily_with_rate():
    # Free Poisson draws of 100 requests offered 7-10 req/s at a nominal 8, so the mean over
    # seeds jumped about near the prefill's capacity; vLLM's stretched schedule does not.
    from simulator.plan.scenarios import mori_io_configs, mori_io_setup

    setup = mori_io_setup()
    write = next(c for c in mori_io_configs() if c.name == "disagg-write")
    means = [
        sum(
            run(setup, write, Workload(100, 2000, 1000, seed=s), rate)["slo_attainment"]
            for s in range(4)
        )
        / 4
        for rate in (6.0, 7.0, 8.0, 9.0)
    ]
    assert all(b <= a + 0.02 for a, b in itertools.pairwise(means))
    assert means[0] > 0.9 and means[-1] < 0.7


def test_the_cli_takes_the_layout_names_the_page_takes(app):
    out = CliRunner().invoke(
        app,
        ["plan", "--config", "disagg-read", "--config", "2xtp4", "--num-prompts", "10", "--json"],
    )
    assert out.exit_code == 0, out.output
    assert [r["config"] for r in json.loads(out.output)["rows"]] == ["disagg-read", "2xTP4"]
    typo = CliRunner().invoke(app, ["plan", "--config", "disagg-raed"])
    assert typo.exit_code == 2
    assert "or one of colocated-tp8, colocated-2xtp4, disagg-read, disagg-write" in typo.output


def test_one_set_of_defaults_for_the_cli_the_api_and_the_page():
    from services.plan_runner import setup_of
    from services.plan_schema import PlanRequest
    from simulator.plan.planner import PLAN_DEFAULTS

    # vLLM's engine defaults for the device: no flag set, prefix caching on as vLLM's.
    assert setup_of(PlanRequest()) == PLAN_DEFAULTS
    engine = PLAN_DEFAULTS.engine_settings(4, PLAN_DEFAULTS.prefill_flags)
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (1024, 16384)
    assert engine.enable_prefix_caching
