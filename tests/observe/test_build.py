"""Frames from scripted scrapes: SLO attainment and goodput from the proxy, KV throughput from
NIXL or derived, engine load, down targets, the burstiness of arrivals."""

from __future__ import annotations

import json
import random

import pytest
from prometheus_client import generate_latest

from connector.measure.metrics import ProxyMetrics, make_registry
from connector.pool.instances import InstancePool
from connector.pool.policy import make_policy
from observe.build import (
    MIN_ARRIVAL_GAPS,
    DeploymentInfo,
    TargetState,
    arrivals,
    attainment,
    build_frame,
    engine_work,
    gamma_shape,
    point,
    with_windows,
)
from observe.frames import WINDOWS
from observe.metrics.samples import parse
from observe.metrics.windows import Delta, Snapshots, advance
from tests.observe.series import engine_text, proxy_text

INFO = DeploymentInfo(
    "pd",
    simulated=True,
    slo={"ttft_ms": 1000.0, "itl_ms": 50.0, "itl_stat": "p99"},
    kv_bytes_per_token=1000,
)
UNITS = [
    {"name": "proxy", "role": "proxy", "state": "RUNNING", "url": "http://p", "mode": None},
    {"name": "prefill-0", "role": "prefill", "state": "RUNNING", "url": "http://a", "mode": "read"},
    {"name": "decode-0", "role": "decode", "state": "RUNNING", "url": "http://b", "mode": "read"},
]


def target(texts: list[tuple[float, str]]) -> TargetState:
    track, snaps, scrape = None, Snapshots(), None
    for ts, text in texts:
        scrape = parse(text)
        track = advance(track, scrape.counters)
        snaps.add(ts, track.totals)
    return TargetState(
        True, scrape.gauges, {"10s": snaps.delta(10), "1m": snaps.delta(60), "5m": snaps.delta(300)}
    )


def test_slo_attainment_goodput_and_rates_from_the_proxy() -> None:
    # 10 s: 40 ok, 10 failed, 5 rejected, 5 cancelled and 30 met every target; 20 invalid.
    proxy = target(
        [
            (0.0, proxy_text()),
            (
                10.0,
                proxy_text(
                    {0.1: 40}, ok=40, failed=10, rejected=5, cancelled=5, invalid=20, met_all=30
                ),
            ),
        ]
    )
    frame = build_frame(INFO, UNITS, {"proxy": proxy}, "10s", 10.0)
    # every request a client counts (not the 20 the clients got wrong): 30 of 60
    assert frame["slo_attainment"] == pytest.approx(0.5)
    assert frame["request_goodput"] == pytest.approx(3.0)
    assert frame["request_rate"] == pytest.approx(6.0)
    assert frame["rejected_share"] == pytest.approx(5 / 60)
    assert frame["outcomes"] == {
        "ok": 4.0,
        "failed": 1.0,
        "rejected": 0.5,
        "cancelled": 0.5,
        "invalid": 2.0,
    }
    assert frame["ttft"]["count"] == 40 and frame["ttft"]["p50"] == pytest.approx(
        0.095
    )  # mid (0.09, 0.1]
    assert frame["proxy"]["up"] is True


def test_an_outage_that_rejects_everything_reads_zero_not_health() -> None:
    # The minute: 307 rejected, 2 finished and met. Over finished requests only this
    # read 100% at 0.03/s; the client saw 2 of 309.
    proxy = target(
        [
            (0.0, proxy_text(arrival_gaps=0)),
            (60.0, proxy_text(ok=2, rejected=307, met_all=2, arrival_gaps=309)),
        ]
    )
    frame = build_frame(INFO, UNITS, {"proxy": proxy}, "1m", 60.0)
    assert frame["slo_attainment"] == pytest.approx(2 / 309)
    assert frame["request_rate"] == pytest.approx(309 / 60)
    assert frame["rejected_share"] == pytest.approx(307 / 309)
    assert frame["outcomes"]["rejected"] == pytest.approx(307 / 60)
    headline = point(frame)
    assert headline["rejected_share"] == frame["rejected_share"]
    assert headline["rejected_rate"] == frame["outcomes"]["rejected"]


def test_arrivals_with_nothing_ended_is_a_point_at_zero() -> None:
    # Every request hangs on a stopped decode: 30 arrived, none ended, no first token.
    proxy = target(
        [(0.0, proxy_text(arrival_gaps=5)), (10.0, proxy_text(arrival_gaps=35, in_flight=30))]
    )
    decode = target([(0.0, engine_text(first_tokens=7)), (10.0, engine_text(first_tokens=7))])
    frame = build_frame(INFO, UNITS, {"proxy": proxy, "decode-0": decode}, "10s", 10.0)
    assert frame["slo_attainment"] == 0.0
    assert frame["request_rate"] == 0.0 and frame["rejected_share"] is None
    assert point(frame)["slo_attainment"] == 0.0


def test_arrivals_still_streaming_are_not_judged_yet() -> None:
    # Long answers: requests arrived, none ended yet, but the decode gave their first tokens.
    proxy = target([(0.0, proxy_text(arrival_gaps=0)), (10.0, proxy_text(arrival_gaps=2))])
    decode = target([(0.0, engine_text(first_tokens=0)), (10.0, engine_text(first_tokens=2))])
    frame = build_frame(INFO, UNITS, {"proxy": proxy, "decode-0": decode}, "10s", 10.0)
    assert frame["slo_attainment"] is None


def test_only_invalid_requests_are_no_traffic() -> None:
    proxy = target(
        [(0.0, proxy_text(arrival_gaps=0)), (10.0, proxy_text(invalid=4, arrival_gaps=4))]
    )
    frame = build_frame(INFO, UNITS, {"proxy": proxy}, "10s", 10.0)
    assert frame["slo_attainment"] is None and frame["outcomes"]["invalid"] == 0.4


def test_no_traffic_means_no_attainment() -> None:
    proxy = target([(0.0, proxy_text(arrival_gaps=3)), (10.0, proxy_text(arrival_gaps=3))])
    frame = build_frame(INFO, UNITS, {"proxy": proxy}, "10s", 10.0)
    assert frame["slo_attainment"] is None and frame["request_goodput"] == 0.0
    assert frame["rejected_share"] is None


def test_attainment_counts() -> None:
    assert attainment(3.0, 4.0, 4.0, None) == 0.75
    assert attainment(0.0, 0.0, 1.0, None) == 0.0  # arrived, nothing ended, no first token
    assert attainment(0.0, 0.0, 1.0, 0.0) == 0.0
    assert attainment(0.0, 0.0, 1.0, 1.0) is None  # first tokens given: still streaming
    assert attainment(0.0, 0.0, 0.0, None) is None  # idle


def test_kv_throughput_is_derived_from_external_prompt_tokens() -> None:
    decode = target(
        [
            (0.0, engine_text(external_tokens=0)),
            (10.0, engine_text(external_tokens=5000, running=3, waiting=1, usage=0.4)),
        ]
    )
    prefill = target([(0.0, engine_text()), (10.0, engine_text(running=2, usage=0.7))])
    frame = build_frame(INFO, UNITS, {"decode-0": decode, "prefill-0": prefill}, "10s", 10.0)
    assert frame["kv"] == {
        "bytes_per_s": pytest.approx(500 * 1000),
        "source": "derived",
        "xfer_p50_ms": None,
        "xfer_p99_ms": None,
    }
    assert frame["running"] == 5 and frame["waiting"] == 1
    assert frame["kv_cache_usage"] == pytest.approx(0.7)


def test_kv_throughput_for_an_unknown_model_is_none() -> None:
    decode = target([(0.0, engine_text()), (10.0, engine_text(external_tokens=10))])
    info = DeploymentInfo("pd", True, INFO.slo, kv_bytes_per_token=None)
    assert build_frame(info, UNITS, {"decode-0": decode}, "10s", 10.0)["kv"]["source"] is None


def test_kv_throughput_and_times_from_nixl_where_present() -> None:
    decode = target(
        [
            (0.0, engine_text(nixl_bytes=0.0)),
            (10.0, engine_text(nixl_bytes=2e9, nixl_times={0.01: 10})),
        ]
    )
    kv = build_frame(INFO, UNITS, {"decode-0": decode}, "10s", 10.0)["kv"]
    assert kv["source"] == "nixl" and kv["bytes_per_s"] == pytest.approx(2e8)
    assert kv["xfer_p50_ms"] == pytest.approx(7.5)


def test_moriio_pairs_get_the_engines_own_times_and_bytes_not_the_derived_figure() -> None:
    # Newer vLLM's MoRIIO exports vllm:moriio_*: those figures, labelled as the engine's.
    decode = target(
        [
            (0.0, engine_text(nixl_bytes=0.0, connector="moriio")),
            (
                10.0,
                engine_text(
                    external_tokens=5000, nixl_bytes=3e9, nixl_times={0.05: 4}, connector="moriio"
                ),
            ),
        ]
    )
    kv = build_frame(INFO, UNITS, {"decode-0": decode}, "10s", 10.0)["kv"]
    assert kv["source"] == "moriio" and kv["bytes_per_s"] == pytest.approx(3e8)
    assert kv["xfer_p50_ms"] == pytest.approx(37.5) and kv["xfer_p99_ms"] is not None
    # Older MoRIIO (`pdctl sim --moriio-metrics none`) exports none: derived, and no times.
    older = target([(0.0, engine_text()), (10.0, engine_text(external_tokens=5000))])
    kv = build_frame(INFO, UNITS, {"decode-0": older}, "10s", 10.0)["kv"]
    assert kv["source"] == "derived" and kv["bytes_per_s"] == pytest.approx(5e5)
    assert kv["xfer_p50_ms"] is None


def test_a_history_point_keeps_the_transfer_times_top_prints() -> None:
    # The page's KV transfer time chart draws history points and frames; `pdctl top` prints
    # the frame's kv.xfer_p50_ms/p99. A point without them left the chart's past empty.
    decode = target(
        [
            (0.0, engine_text(nixl_bytes=0.0, connector="moriio")),
            (10.0, engine_text(nixl_bytes=3e9, nixl_times={0.005: 4}, connector="moriio")),
        ]
    )
    frame = build_frame(INFO, UNITS, {"decode-0": decode}, "10s", 10.0)
    kept = point(frame)
    assert kept["xfer_p50_ms"] == frame["kv"]["xfer_p50_ms"] == pytest.approx(2.5)
    assert kept["xfer_p99_ms"] == frame["kv"]["xfer_p99_ms"] == pytest.approx(4.95)
    assert point(build_frame(INFO, UNITS, {}, "10s", 10.0))["xfer_p50_ms"] is None


def test_a_down_target_is_up_false_and_the_frame_still_builds() -> None:
    frame = build_frame(INFO, UNITS, {}, "1m", 5.0)
    assert frame["proxy"]["up"] is False
    assert [i["up"] for i in frame["instances"]] == [False, False]
    # Nothing scraped: no counts, not zeros that read as an idle instance.
    assert [(i["running"], i["waiting"]) for i in frame["instances"]] == [(None, None)] * 2
    assert frame["ttft"]["count"] == 0 and frame["kv_cache_usage"] is None
    assert frame["engine_ttft"] is None


def test_an_instance_row_carries_its_node() -> None:
    placed = [
        UNITS[0],
        {**UNITS[1], "address": "127.0.0.2", "node": "n2"},
        {**UNITS[2], "address": None, "node": None},
    ]
    rows = build_frame(INFO, placed, {}, "1m", 5.0)["instances"]
    assert [(r["address"], r["node"]) for r in rows] == [("127.0.0.2", "n2"), (None, None)]


def test_frames_and_points_serialize_as_json() -> None:
    proxy = target([(0.0, proxy_text()), (10.0, proxy_text({0.1: 3, 2560.0: 1}, ok=4))])
    frames = {w: build_frame(INFO, UNITS, {"proxy": proxy}, w, 10.0) for w in WINDOWS}
    text = json.dumps(with_windows(frames["1m"], frames), allow_nan=False)
    assert json.loads(text)["windows"]["10s"]["ttft_count"] == 4
    assert point(frames["10s"])["ts"] == 10.0


def test_engine_work_counts_prompts_and_prefix_hits_on_prefilling_roles_only() -> None:
    def counts(**values: float) -> Delta:
        return Delta(10.0, {(name, ()): v for name, v in values.items()})

    prefill = counts(
        **{
            "vllm:prompt_tokens_total": 20_000,
            "vllm:request_success_total": 10,
            "vllm:prefix_cache_queries_total": 20_000,
            "vllm:prefix_cache_hits_total": 5_000,
            "process_cpu_seconds_total": 3.0,
        }
    )
    decode = counts(
        **{
            "vllm:prompt_tokens_total": 99_999,
            "vllm:request_success_total": 1,
            "vllm:prefix_cache_queries_total": 1,
            "process_cpu_seconds_total": 6.0,
        }
    )
    work = engine_work([("prefill", prefill), ("decode", decode)])
    assert work == {
        "prompt_tokens_per_request": 2000.0,
        "prefix_hit_rate": 0.25,
        "output_tokens_per_request": None,  # the decode counts no generation tokens
        "cpu_cores_max": 0.6,
        "render_instances": 0,
        "render_cpu_cores_max": None,
    }
    assert engine_work([("decode", decode)])["prompt_tokens_per_request"] is None
    answering = counts(**{"vllm:generation_tokens_total": 640, "vllm:request_success_total": 10})
    work = engine_work([("prefill", prefill), ("decode", answering)])
    assert work["output_tokens_per_request"] == 64.0  # the decode's, never the prefill's 1s
    render = counts(**{"process_cpu_seconds_total": 9.0})
    with_render = engine_work([("prefill", prefill), ("decode", decode), ("render", render)])
    assert with_render["cpu_cores_max"] == 0.6  # the engines' frontends, as before
    assert with_render["render_instances"] == 1 and with_render["render_cpu_cores_max"] == 0.9
    assert engine_work([]) == {
        "prompt_tokens_per_request": None,
        "prefix_hit_rate": None,
        "output_tokens_per_request": None,
        "cpu_cores_max": None,
        "render_instances": 0,
        "render_cpu_cores_max": None,
    }


def test_interference_is_the_share_of_spikes_at_a_prefill_and_zero_without_spikes() -> None:
    from observe.build import interference

    def counts(spikes: float, at: float) -> Delta:
        return Delta(
            10.0,
            {
                ("pdctl_proxy_itl_spikes_total", ()): spikes,
                ("pdctl_proxy_itl_spikes_at_prefill_total", ()): at,
            },
        )

    assert interference(counts(20, 15)) == {"spikes_per_s": 2.0, "at_prefill_share": 0.75}
    assert interference(counts(0, 0)) == {"spikes_per_s": 0.0, "at_prefill_share": 0.0}
    assert interference(Delta(10.0, {})) == {"spikes_per_s": None, "at_prefill_share": None}


def test_multi_turn_share_counts_chat_turns_only() -> None:
    from observe.build import multi_turn_share

    def turns(**kinds: float) -> Delta:
        return Delta(
            10.0, {("pdctl_proxy_turns_total", (("kind", k),)): v for k, v in kinds.items()}
        )

    assert multi_turn_share(turns(first=2, follow_up=6, unknown=50)) == 0.75
    assert multi_turn_share(turns(unknown=50)) is None


def moments(gaps: list[float]) -> tuple[float, float, float]:
    return len(gaps), sum(gaps), sum(g * g for g in gaps)


def test_poisson_arrivals_have_gamma_shape_one() -> None:
    rng = random.Random(7)
    gaps = [rng.expovariate(5.0) for _ in range(4000)]
    assert 0.85 <= gamma_shape(*moments(gaps)) <= 1.15


@pytest.mark.parametrize("shape", [0.3, 4.0])
def test_gamma_gaps_give_back_their_shape(shape: float) -> None:
    rng = random.Random(11)
    gaps = [rng.gammavariate(shape, 0.2 / shape) for _ in range(4000)]
    assert gamma_shape(*moments(gaps)) == pytest.approx(shape, rel=0.15)


def test_evenly_spaced_arrivals_with_jitter_have_a_large_shape() -> None:
    rng = random.Random(3)
    gaps = [0.1 + rng.uniform(-0.002, 0.002) for _ in range(200)]
    assert gamma_shape(*moments(gaps)) > 1000


def test_too_few_gaps_or_no_spread_give_no_shape() -> None:
    rng = random.Random(5)
    gaps = [rng.expovariate(1.0) for _ in range(MIN_ARRIVAL_GAPS)]
    assert gamma_shape(*moments(gaps)) is not None
    assert gamma_shape(*moments(gaps[:-1])) is None
    assert gamma_shape(*moments([0.1] * 50)) is None  # a few ulps of rounding, no spread
    assert gamma_shape(*moments([1 / 3] * 50)) is None
    assert gamma_shape(*moments([0.0] * 50)) is None


def test_the_frame_reads_the_window_s_arrivals_from_the_proxy_s_own_export() -> None:
    """Real ProxyMetrics text at two scrapes: the 10s window holds only the later gaps."""
    metrics, rng = ProxyMetrics(), random.Random(9)
    registry = make_registry(metrics, InstancePool(make_policy("round-robin")))
    now, later = 0.0, []
    for _ in range(31):  # 30 evenly spaced gaps before the window
        now += 0.1
        metrics.arrived(now)
    before = generate_latest(registry).decode()
    for _ in range(400):  # 400 bursty ones in it
        gap = rng.gammavariate(0.3, 0.025 / 0.3)
        later.append(gap)
        now += gap
        metrics.arrived(now)
    proxy = target([(0.0, before), (10.0, generate_latest(registry).decode())])
    frame = build_frame(INFO, UNITS, {"proxy": proxy}, "10s", 10.0)
    assert frame["arrivals"]["gaps"] == 400 and frame["arrivals"]["per_s"] == 40.0
    assert frame["arrivals"]["burstiness"] == pytest.approx(gamma_shape(*moments(later)))
    assert frame["arrivals"]["burstiness"] < 0.5
    assert arrivals(Delta(10.0, {})) == {
        "per_s": None,
        "gaps": None,
        "burstiness": None,
        "prompt_tokens_per_s": None,
        "output_tokens_per_s": None,
    }


def test_the_tokens_arriving_requests_bring_are_a_rate_over_the_window():
    metrics = ProxyMetrics()
    registry = make_registry(metrics, InstancePool(make_policy("round-robin")))
    before = generate_latest(registry).decode()
    for _ in range(20):
        metrics.demand.arrived(3000, 16)
    proxy = target([(0.0, before), (10.0, generate_latest(registry).decode())])
    frame = build_frame(INFO, UNITS, {"proxy": proxy}, "10s", 10.0)
    assert frame["arrivals"]["prompt_tokens_per_s"] == pytest.approx(6000.0)
    assert frame["arrivals"]["output_tokens_per_s"] == pytest.approx(32.0)


def _keys_match(value, typed) -> list[str]:
    """Where a built structure's keys differ from its TypedDict's (recursively, into
    optional parts, lists of rows and maps of headlines)."""
    import typing

    hints = typing.get_type_hints(typed)
    required = set(typed.__required_keys__)
    wrong = []
    if not required <= set(value) <= set(hints):
        wrong.append(f"{typed.__name__}: {sorted(set(value) ^ required)}")
    for key, hint in hints.items():
        inner = value.get(key)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is list and args and typing.is_typeddict(args[0]):
            wrong += [w for item in inner or [] for w in _keys_match(item, args[0])]
        elif origin is dict and args and typing.is_typeddict(args[1]):
            wrong += [w for item in (inner or {}).values() for w in _keys_match(item, args[1])]
        else:
            for arg in (hint, *args):
                if typing.is_typeddict(arg) and isinstance(inner, dict):
                    wrong += _keys_match(inner, arg)
    return wrong


def test_a_built_frame_has_exactly_the_typed_frame_s_keys() -> None:
    from observe.frames import Frame, Point

    proxy = target([(0.0, proxy_text()), (10.0, proxy_text({0.25: 20}, ok=20, met_all=15))])
    decode = target([(0.0, engine_text()), (10.0, engine_text(external_tokens=2000))])
    frame = build_frame(INFO, UNITS, {"proxy": proxy, "decode-0": decode}, "10s", 10.0)
    assert _keys_match(frame, Frame) == []
    assert _keys_match(with_windows(frame, {"10s": frame}), Frame) == []
    assert _keys_match(point(frame), Point) == []
    assert _keys_match({**frame, "stray": 1}, Frame) != []  # the check can fail
