"""observe/attached/watch.py: an attached deployment's status rows, and the client's figures from
the engines' own histograms when no pdctl proxy stands in front."""

from __future__ import annotations

import pytest

from controller.spec.deployment import DeploymentSpec
from observe.attached.watch import (
    attached_units,
    canary_units,
    engine_latency,
    health_transition,
)
from observe.metrics.windows import Delta

BOUNDS = (0.05, 0.1, 0.25, 0.5, 0.75, float("inf"))


def hist(name: str, values: list[float]) -> dict:
    """A window's increases of histogram `name` holding `values`."""
    counts = {}
    for le in BOUNDS:
        label = "+Inf" if le == float("inf") else repr(le)
        counts[(name + "_bucket", (("le", label),))] = float(sum(v <= le for v in values))
    counts[(name + "_sum", ())] = sum(values)
    counts[(name + "_count", ())] = float(len(values))
    return counts


def engine(ttft: list[float], itl: list[float] = (), done: float | None = None) -> Delta:
    counts = {
        **hist("vllm:time_to_first_token_seconds", ttft),
        **hist("vllm:inter_token_latency_seconds", list(itl)),
    }
    if done is not None:
        counts[("vllm:request_success_total", (("finished_reason", "length"),))] = done
    return Delta(10.0, counts)


def spec(kind: str | None) -> DeploymentSpec:
    return DeploymentSpec.model_validate(
        {
            "name": "ext",
            "engine": "external",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": "NixlConnector",
            "groups": [
                {"name": "prefill", "role": "prefill", "urls": ["http://127.0.0.1:1"]},
                {"name": "decode", "role": "decode", "urls": ["http://127.0.0.1:2"]},
            ],
            "external_proxy": {"url": "http://127.0.0.1:3", "kind": kind} if kind else None,
        }
    )


def test_the_client_ttft_is_the_prefill_leg_plus_the_decode_leg():
    prefill = engine([0.13] * 10, done=10)
    decode = engine([0.30] * 10, [0.06] * 150)
    shown = engine_latency([prefill], [decode], slo_ttft_ms=1000)
    # one bucket holds them all: the medians are the legs' means, not mid-bucket guesses
    assert shown["ttft"]["p50"] == pytest.approx(0.43)
    assert shown["itl"]["p50"] == pytest.approx(0.06)
    assert shown["slo_attainment"] == 1.0


def test_legs_mostly_in_one_wide_bucket_add_their_means_not_mid_bucket_guesses():
    # the shape measured behind vllm-router: 3/4 of each leg in one bucket 2.5x wide
    prefill = engine([0.18] * 24 + [0.3] * 7 + [0.6], done=32)
    decode = engine([0.2] * 8 + [0.285] * 24)
    shown = engine_latency([prefill], [decode], slo_ttft_ms=None)
    assert shown["ttft"]["p50"] == pytest.approx((4.32 + 2.1 + 0.6 + 1.6 + 6.84) / 32)
    assert shown["ttft"]["p90"] > shown["ttft"]["p50"]  # the tail stays interpolated


def test_spread_histograms_keep_the_interpolated_median():
    decode = engine([0.02, 0.07, 0.2, 0.3, 0.4])
    shown = engine_latency([], [decode], slo_ttft_ms=None)
    assert shown["ttft"]["p50"] == pytest.approx(0.175)  # 0.1 + 0.15 * (2.5 - 2) / 1
    assert shown["slo_attainment"] is None  # no target, nothing judged


def test_a_prefilled_request_no_decode_answered_is_missed():
    prefill = engine([0.13] * 6, done=6)
    assert engine_latency([prefill], [], slo_ttft_ms=1000)["slo_attainment"] == 0.0


def test_first_tokens_over_what_the_prefill_left_of_the_target_are_missed():
    prefill = engine([0.2] * 4, done=4)
    decode = engine([0.1, 0.1, 0.4, 0.45])
    shown = engine_latency([prefill], [decode], slo_ttft_ms=350)  # 150 ms left for the decode
    assert shown["slo_attainment"] == 0.5  # the two at 100 ms of four


def test_nothing_arrived_is_no_attainment():
    assert engine_latency([], [], slo_ttft_ms=1000)["slo_attainment"] is None


def test_units_scrape_a_pdctl_proxy_and_give_any_proxy_to_the_canary():
    mine = attached_units(spec("pdctl"))
    assert [u["name"] for u in mine] == ["proxy", "prefill-0", "decode-0"]
    routed = attached_units(spec("vllm-router"))
    assert [u["role"] for u in routed] == ["prefill", "decode"]  # its /metrics are not ours
    assert all(u["state"] == "RUNNING" and u["attached"] for u in routed)
    told = canary_units(spec("vllm-router"), routed)
    assert told[0]["role"] == "proxy" and told[0]["url"] == "http://127.0.0.1:3"
    assert canary_units(spec(None), routed) == routed


def test_health_events_on_each_change_of_answer_only():
    unit = {"name": "decode-0", "url": "http://127.0.0.1:2"}
    assert health_transition("ext", unit, None, True, None) is None
    down = health_transition("ext", unit, True, False, "connection refused")
    assert down is not None and down.kind == "attached.instance_down"
    assert "connection refused" in down.message and down.detail["instance"] == "decode-0"
    assert health_transition("ext", unit, False, False, "x") is None
    up = health_transition("ext", unit, False, True, None)
    assert up is not None and up.kind == "attached.instance_up"
    never = health_transition("ext", unit, None, False, "timeout")
    assert never is not None and never.kind == "attached.instance_down"


def test_status_rows_say_which_instance_answers_and_name_the_users_proxy():
    from observe.attached.watch import attached_status

    before = attached_status(spec("vllm-router"), None)
    assert [(r["name"], r["state"], r["watched"]) for r in before] == [
        ("proxy", "RUNNING", False),
        ("prefill-0", "RUNNING", True),
        ("decode-0", "RUNNING", True),
    ]
    frame = {"instances": [{"name": "prefill-0", "up": True}, {"name": "decode-0", "up": False}]}
    rows = attached_status(spec("vllm-router"), frame)
    assert [r["state"] for r in rows] == ["RUNNING", "RUNNING", "DOWN"]
    assert rows[0]["url"] == "http://127.0.0.1:3"  # where pdctl bench --deployment sends load
