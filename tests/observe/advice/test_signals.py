"""The advisor's signals from fabricated live frames, bench results and plan rows: each
derived from its stated source, each missing one absent with a reason, never guessed."""

from __future__ import annotations

import pytest

from observe.advice.signals import advice, from_bench, from_frame, from_plan

KV_PER_TOKEN = 327_680  # llama-3.1-70b BF16


def hist(count: float, p50: float | None, p99: float | None) -> dict:
    return {"buckets": [], "count": count, "p50": p50, "p90": None, "p99": p99}


def frame(**changes) -> dict:
    """A disaggregated deployment's 1m frame: 4 req/s, 2,000-token prompts moved over NIXL."""
    base = {
        "type": "frame",
        "deployment": "pd",
        "ts": 1000.0,
        "window": "1m",
        "simulated": True,
        "slo": {"ttft_ms": 1000.0, "itl_ms": 50.0, "itl_stat": "p99"},
        "ttft": hist(240, 0.300, 1.2),
        "itl": hist(50_000, 0.030, 0.045),
        "engine_ttft": None,
        "engine_itl": None,
        "slo_attainment": 0.8,
        "request_goodput": 3.2,
        "request_rate": 4.0,
        "outcomes": {"ok": 4.0, "failed": 0.0, "rejected": 0.0},
        "kv": {
            "bytes_per_s": 4.0 * 2000 * KV_PER_TOKEN,
            "source": "nixl",
            "xfer_p50_ms": 60.0,
            "xfer_p99_ms": 90.0,
        },
        "running": 30,
        "waiting": 0,
        "kv_cache_usage": 0.4,
        "instances": [],
        "proxy": {"up": True, "in_flight": 30, "held": 0, "loop_lag_s": 0.001},
    }
    base.update(changes)
    return base


def verdict(result: dict, rule: str) -> dict:
    return next(v for v in result["verdicts"] if v["rule"] == rule)


def test_live_latencies_come_from_the_proxy_histograms_in_ms():
    d = from_frame(frame(), topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN)
    assert d.values["ttft_p99_ms"] == pytest.approx(1200)
    assert d.values["itl_p99_ms"] == pytest.approx(45)
    assert d.values["itl_p50_ms"] == pytest.approx(30)
    assert d.values["request_rate"] == 4.0 and d.values["slo_attainment"] == 0.8
    assert d.values["slo_ttft_ms"] == 1000.0 and d.values["topology"] == "disaggregated"
    assert "proxy TTFT histogram" in d.sources["ttft_p99_ms"]
    assert "1m window" in d.sources["itl_p99_ms"]


def test_live_prompt_length_and_transfer_come_from_kv_throughput_and_nixl_times():
    d = from_frame(frame(), topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN)
    assert d.values["prompt_tokens_mean"] == pytest.approx(2000)
    # 2,000 tokens x 327,680 B in 60 ms
    assert d.values["kv_transfer_gbps"] == pytest.approx(
        2000 * KV_PER_TOKEN / 0.060 / 1e9, rel=1e-3
    )
    assert d.values["transfer_share_of_ttft"] == pytest.approx(60 / 300)


def test_concurrency_is_the_mean_running_over_the_windows_history():
    points = [{"ts": t, "running": r} for t, r in ((950, 10), (955, 20), (960, 30))]
    d = from_frame(frame(), points, topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN)
    assert d.values["concurrency_mean"] == 20
    assert "3 history points" in d.sources["concurrency_mean"]
    alone = from_frame(frame(running=7), topology="colocated")
    assert alone.values["concurrency_mean"] == 7 and "now" in alone.sources["concurrency_mean"]


def test_moriio_transfer_times_feed_the_transfer_signals_as_the_engines_own():
    kv = {"bytes_per_s": 4.0 * 2000 * KV_PER_TOKEN, "source": "moriio", "xfer_p50_ms": 60.0}
    d = from_frame(frame(kv=kv), topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN)
    assert d.values["transfer_share_of_ttft"] == pytest.approx(60 / 300)
    assert "median MoRIIO transfer time (the engine's own)" in d.sources["kv_transfer_gbps"]


def test_older_moriio_reports_no_transfer_times_so_those_signals_stay_absent():
    kv = {
        "bytes_per_s": 4.0 * 2000 * KV_PER_TOKEN,
        "source": "derived",
        "xfer_p50_ms": None,
        "xfer_p99_ms": None,
    }
    d = from_frame(frame(kv=kv), topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN)
    assert d.values["prompt_tokens_mean"] == pytest.approx(2000)
    assert "kv_transfer_gbps" not in d.values and "transfer_share_of_ttft" not in d.values
    assert "older MoRIIO, a derived figure, does not" in d.absent["kv_transfer_gbps"]
    result = advice(d)
    assert verdict(result, "slow_kv_transfer")["triggered"] is None
    assert verdict(result, "slow_kv_transfer")["sources"]["transfer_share_of_ttft"].startswith(
        "absent: "
    )


def test_colocated_frames_have_no_transfer_and_no_prompt_length_without_engine_counts():
    d = from_frame(
        frame(kv={"bytes_per_s": None, "source": None, "xfer_p50_ms": None, "xfer_p99_ms": None}),
        topology="colocated",
    )
    for name in ("kv_transfer_gbps", "transfer_share_of_ttft"):
        assert name not in d.values and "colocated" in d.absent[name]
    assert "no request finished on a prefilling engine" in d.absent["prompt_tokens_mean"]


ENGINES = {"prompt_tokens_per_request": 3000.0, "prefix_hit_rate": 0.75, "cpu_cores_max": 0.9}


def test_engine_counters_give_prompt_length_prefix_hits_and_frontend_cpu():
    d = from_frame(frame(engines=ENGINES, simulated=False), topology="colocated")
    assert d.values["prompt_tokens_mean"] == 3000.0
    assert "vllm:prompt_tokens / vllm:request_success" in d.sources["prompt_tokens_mean"]
    assert d.values["prefix_hit_rate"] == 0.75 and d.values["frontend_cpu_share"] == 0.9
    result = advice(d)
    assert verdict(result, "prefix_cache_heavy")["triggered"] is True
    assert verdict(result, "frontend_cpu")["triggered"] is True
    quiet = from_frame(
        frame(engines={**ENGINES, "prefix_hit_rate": 0.05, "cpu_cores_max": 0.2}, simulated=False),
        topology="colocated",
    )
    assert verdict(advice(quiet), "prefix_cache_heavy")["triggered"] is False
    assert verdict(advice(quiet), "frontend_cpu")["triggered"] is False


def test_engine_counts_beat_the_kv_derived_prompt_length_when_disaggregated():
    d = from_frame(
        frame(engines=ENGINES), topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN
    )
    assert d.values["prompt_tokens_mean"] == 3000.0


def test_the_stand_ins_modelled_api_server_is_the_frontend_and_no_queries_is_no_hit_rate():
    """The stand-in exports the CPU vLLM's API server would spend
    (simulator/model/frontend_clock.py),
    so it is read as real vLLM's is."""
    d = from_frame(frame(engines={**ENGINES, "prefix_hit_rate": None}), topology="colocated")
    assert d.values["frontend_cpu_share"] == 0.9
    assert "API server process" in d.sources["frontend_cpu_share"]
    assert "prefix caching off" in d.absent["prefix_hit_rate"]
    no_cpu = from_frame(frame(engines={**ENGINES, "cpu_cores_max": None}), topology="colocated")
    assert "no instance exports process_cpu_seconds_total" in no_cpu.absent["frontend_cpu_share"]


def test_a_render_tiers_cpu_is_the_frontend_cpu_on_the_stand_in_too():
    engines = {**ENGINES, "cpu_cores_max": 0.3, "render_instances": 2, "render_cpu_cores_max": 0.85}
    d = from_frame(frame(engines=engines), topology="disaggregated")
    assert d.values["frontend_cpu_share"] == 0.85
    assert "busiest render tier instance" in d.sources["frontend_cpu_share"]
    assert verdict(advice(d), "frontend_cpu")["triggered"] is True
    unscraped = from_frame(frame(engines={**engines, "render_cpu_cores_max": None}))
    assert "render tier exports no" in unscraped.absent["frontend_cpu_share"]


@pytest.mark.parametrize(
    ("render", "engine", "share", "named"),
    [(0.3, 0.9, 0.9, "engine API server"), (0.85, 0.4, 0.85, "render tier")],
)
def test_with_a_render_tier_real_engines_api_servers_still_count(render, engine, share, named):
    """A tier that took the prompts off vLLM's API servers can leave their streaming hot: the
    busiest of the two is the frontend's figure, and the source says which it was."""
    engines = {
        **ENGINES,
        "cpu_cores_max": engine,
        "render_instances": 1,
        "render_cpu_cores_max": render,
    }
    d = from_frame(frame(engines=engines, simulated=False), topology="disaggregated")
    assert d.values["frontend_cpu_share"] == share
    assert f"here the {named}" in d.sources["frontend_cpu_share"]
    assert verdict(advice(d), "frontend_cpu")["triggered"] is True
    no_engine_cpu = {**engines, "cpu_cores_max": None}
    alone = from_frame(frame(engines=no_engine_cpu, simulated=False), topology="disaggregated")
    assert alone.values["frontend_cpu_share"] == render


def test_an_idle_window_gives_no_latencies_rather_than_zeros():
    d = from_frame(
        frame(
            ttft=hist(0, None, None),
            itl=hist(0, None, None),
            request_rate=None,
            slo_attainment=None,
        ),
        topology="colocated",
    )
    for name in ("ttft_p99_ms", "itl_p99_ms", "itl_p50_ms", "slo_attainment", "request_rate"):
        assert name not in d.values, name
    assert "no requests finished in the 1m window" in d.absent["ttft_p99_ms"]


def test_without_a_frame_only_the_spec_speaks_and_every_measured_rule_says_no_signal():
    d = from_frame(None, topology="colocated", slo={"ttft_ms": 500.0, "itl_ms": 40.0})
    assert d.values == {"topology": "colocated", "slo_ttft_ms": 500.0, "slo_itl_ms": 40.0}
    assert "not running" in d.absent["ttft_p99_ms"]
    assert all(v["triggered"] is None for v in advice(d)["verdicts"])


def test_signals_no_frame_carries_are_absent_with_a_reason():
    d = from_frame(frame(), topology="colocated")
    for name in (
        "spike_prefill_overlap",
        "multi_turn_share",
        "frontend_cpu_share",
        "burstiness",
        "prefix_hit_rate",
    ):
        assert name not in d.values and d.absent[name]
    assert d.absent["burstiness"] == "the proxy reports no arrival gaps"


def test_burstiness_is_the_proxys_measured_gamma_shape_of_arrival_gaps():
    bursty = from_frame(
        frame(arrivals={"per_s": 4.2, "gaps": 250, "burstiness": 0.3}),
        topology="disaggregated",
        kv_bytes_per_token=KV_PER_TOKEN,
    )
    assert bursty.values["burstiness"] == 0.3
    assert bursty.sources["burstiness"] == (
        "proxy: gamma shape of arrival gaps (mean^2/variance), 1m window"
    )
    light = verdict(advice(bursty), "light_traffic")  # 4 req/s of 2,000-token prompts
    assert light["triggered"] is True and light["advice"].startswith("bursty arrivals")
    assert light["evidence"]["burstiness"] == 0.3
    assert light["sources"]["burstiness"].startswith("proxy: gamma shape")
    steady = from_frame(
        frame(arrivals={"per_s": 4.2, "gaps": 250, "burstiness": 1.1}),
        topology="disaggregated",
        kv_bytes_per_token=KV_PER_TOKEN,
    )
    assert verdict(advice(steady), "light_traffic")["triggered"] is False


def test_too_few_arrivals_leave_burstiness_absent_and_say_so():
    few = from_frame(
        frame(arrivals={"per_s": 0.1, "gaps": 6, "burstiness": None}), topology="colocated"
    )
    assert "burstiness" not in few.values
    assert few.absent["burstiness"] == (
        "fewer than 20 arrivals at the proxy in the 1m window (6 gaps)"
    )
    light = verdict(advice(few), "light_traffic")
    assert light["sources"]["burstiness"].startswith("absent: fewer than 20 arrivals")
    even = from_frame(
        frame(arrivals={"per_s": 1.0, "gaps": 60, "burstiness": None}), topology="colocated"
    )
    assert "evenly spaced" in even.absent["burstiness"]
    assert "not running" in from_frame(None, topology="colocated").absent["burstiness"]


def test_ttft_bound_live_deployment_triggers_ttft_binding_with_its_numbers():
    result = advice(from_frame(frame(), topology="disaggregated", kv_bytes_per_token=KV_PER_TOKEN))
    v = verdict(result, "ttft_binding")
    assert v["triggered"] is True
    assert v["evidence"] == {"ttft_p99_ms": 1200.0, "slo_ttft_ms": 1000.0, "itl_p99_ms": 45.0}
    assert v["sources"]["ttft_p99_ms"].startswith("proxy TTFT histogram p99")
    assert verdict(result, "itl_interference")["triggered"] is None  # no spike signal


# -- bench ----------------------------------------------------------------------------------

BENCH = {
    "request_rate": 8.0,
    "burstiness": 1.0,
    "dataset": "random",
    "completed": 100,
    "total_input_tokens": 200_000,
    "request_throughput": 2.5,
    "mean_e2el_ms": 40_000.0,
    "p99_ttft_ms": 600.0,
    "p99_itl_ms": 180.0,
    "median_itl_ms": 32.0,
    "slo_ttft_ms": 1000.0,
    "slo_itl_ms": 50.0,
    "slo_attainment": 0.26,
}


def test_bench_signals_come_from_vllm_field_names_and_littles_law():
    d = from_bench(BENCH, topology="colocated")
    assert d.values["prompt_tokens_mean"] == 2000
    assert d.values["concurrency_mean"] == pytest.approx(100)  # 2.5 req/s x 40 s
    assert d.values["itl_p99_ms"] == 180.0 and d.values["multi_turn_share"] == 0.0
    assert "Little's law" in d.sources["concurrency_mean"]
    assert "spike_prefill_overlap" in d.absent and "kv_transfer_gbps" in d.absent


def test_a_bench_run_offering_everything_at_once_reports_its_measured_rate():
    d = from_bench({**BENCH, "request_rate": "inf"})
    assert d.values["request_rate"] == 2.5 and "at once" in d.sources["request_rate"]
    assert "topology" not in d.values


def test_a_failed_bench_run_gives_no_latencies():
    d = from_bench({**BENCH, "completed": 0})
    assert "ttft_p99_ms" not in d.values and "prompt_tokens_mean" not in d.values


# -- plan -----------------------------------------------------------------------------------

PLAN = {
    "slo": {"ttft_ms": 1000.0, "itl_ms": 50.0, "itl_stat": "p99"},
    "workload": {
        "num_prompts": 100,
        "input_len": 2000,
        "output_len": 1000,
        "burstiness": 1.0,
        "shared_prefix_len": 0,
    },
    "kv_bytes_per_token": 94_208,
    "links_gbps": {"disagg-write": 200.0},
    "topologies": {"disagg-write": "disaggregated", "colocated-tp8": "colocated"},
}
ROW = {
    "config": "disagg-write",
    "rate": 8.0,
    "requests": 100,
    "slo_attainment": 0.42,
    "p50_ttft_ms": 900.0,
    "p99_ttft_ms": 2280.0,
    "p50_itl_ms": 35.0,
    "p99_itl_ms": 35.1,
    "output_throughput": 2000.0,
}


def test_plan_rows_take_topology_link_and_workload_from_the_result():
    d = from_plan(PLAN, ROW)
    assert d.values["topology"] == "disaggregated"
    assert d.values["kv_transfer_gbps"] == 200.0
    assert d.values["prompt_tokens_mean"] == 2000 and d.values["prefix_hit_rate"] == 0.0
    assert d.values["concurrency_mean"] == pytest.approx(70)  # 2,000 tok/s x 35 ms
    transfer_ms = 2000 * 94_208 / 200e9 * 1000
    assert d.values["transfer_share_of_ttft"] == pytest.approx(transfer_ms / 900, rel=1e-3)
    assert verdict(advice(d), "ttft_binding")["triggered"] is True


def test_plan_labels_without_topologies_fall_back_to_the_planners_label_shape():
    bare = {"slo": PLAN["slo"]}
    assert (
        from_plan(bare, {**ROW, "config": "1P-TP4+1D-TP4 read"}).values["topology"]
        == "disaggregated"
    )
    assert from_plan(bare, {**ROW, "config": "2xTP4"}).values["topology"] == "colocated"
    unknown = from_plan(bare, ROW)
    assert "topology" not in unknown.values and "does not say" in unknown.absent["topology"]
    assert "prompt_tokens_mean" not in unknown.values


def test_itl_spikes_that_line_up_with_prefills_trigger_disaggregation_and_others_do_not():
    slow = {"itl": hist(50_000, 0.030, 0.150)}  # p99 150 ms over a 50 ms target
    lined_up = from_frame(
        frame(**slow, interference={"spikes_per_s": 3.0, "at_prefill_share": 0.95}),
        topology="colocated",
    )
    assert lined_up.values["spike_prefill_overlap"] == 0.95
    assert "prefill finished on the same instance" in lined_up.sources["spike_prefill_overlap"]
    assert verdict(advice(lined_up), "itl_interference")["triggered"] is True
    elsewhere = from_frame(
        frame(**slow, interference={"spikes_per_s": 3.0, "at_prefill_share": 0.0}),
        topology="colocated",
    )
    assert verdict(advice(elsewhere), "itl_interference")["triggered"] is False
    unknown = from_frame(frame(**slow), topology="colocated")
    assert "no ITL spike counts" in unknown.absent["spike_prefill_overlap"]


def test_multi_turn_share_comes_from_the_proxy_and_drives_its_rule():
    d = from_frame(frame(multi_turn_share=0.6), topology="colocated")
    assert d.values["multi_turn_share"] == 0.6
    assert verdict(advice(d), "multi_turn")["triggered"] is True
    none = from_frame(frame(multi_turn_share=None), topology="colocated")
    assert "no chat request" in none.absent["multi_turn_share"]
