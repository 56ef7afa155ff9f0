"""Flag checks: every bad value names its flag."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from bench.config import (
    BenchConfig,
    BenchConfigError,
    parse_headers,
    parse_itl_stat,
    parse_rates,
    validate,
)
from bench.records import SloTargets

GOOD = BenchConfig(base_url="http://127.0.0.1:8000")


def test_rates_parse_one_value_a_list_and_inf() -> None:
    assert parse_rates("4") == (4.0,)
    assert parse_rates("1, 2.5,inf") == (1.0, 2.5, math.inf)


@pytest.mark.parametrize("text", ["-1", "0", "abc", "1,,2", "nan"])
def test_bad_rates_name_the_flag(text: str) -> None:
    with pytest.raises(BenchConfigError) as caught:
        parse_rates(text)
    assert caught.value.flag == "--request-rate"


def test_itl_stat_choices() -> None:
    assert parse_itl_stat("max") == "max"
    with pytest.raises(BenchConfigError, match="--itl-slo-stat"):
        parse_itl_stat("p50")


def test_headers_parse_key_value_pairs() -> None:
    assert parse_headers(["X-A=1", "X-B=a=b", "X-C="]) == (
        ("X-A", "1"),
        ("X-B", "a=b"),
        ("X-C", ""),
    )
    for bad in ("novalue", "=1"):
        with pytest.raises(BenchConfigError, match="--header"):
            parse_headers([bad])


def test_good_config_passes() -> None:
    assert validate(GOOD) is GOOD


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"base_url": "localhost:8000"}, "--base-url"),
        ({"base_url": "ftp://host"}, "--base-url"),
        ({"base_url": "http://"}, "--base-url"),
        ({"base_url": "http://host:notaport"}, "--base-url"),
        ({"endpoint": "embeddings"}, "--endpoint"),
        ({"dataset": "sharegpt"}, "--dataset"),
        ({"num_prompts": 0}, "--num-prompts"),
        ({"input_len": 0}, "--input-len"),
        ({"output_len": -3}, "--output-len"),
        ({"turns": 0}, "--turns"),
        ({"max_concurrency": 0}, "--max-concurrency"),
        ({"range_ratio": 1.0}, "--range-ratio"),
        ({"range_ratio": -0.1}, "--range-ratio"),
        ({"burstiness": 0.0}, "--burstiness"),
        ({"timeout": 0.0}, "--timeout"),
        ({"slo": SloTargets(ttft_ms=-5)}, "--slo-ttft-ms"),
        ({"slo": SloTargets(itl_ms=0)}, "--slo-itl-ms"),
        ({"slo": SloTargets(tpot_ms=math.inf)}, "--slo-tpot-ms"),
        ({"goodput_share": 0.0}, "--goodput-share"),
        ({"goodput_share": 1.5}, "--goodput-share"),
        ({"prompt_token_ids": True, "endpoint": "chat"}, "--prompt-token-ids"),
        ({"tokenizer": "tok.json", "dataset": "shared-prefix"}, "--tokenizer"),
    ],
)
def test_bad_values_name_the_flag(change: dict[str, object], flag: str) -> None:
    with pytest.raises(BenchConfigError) as caught:
        validate(replace(GOOD, **change))
    assert caught.value.flag == flag
    assert str(caught.value).startswith(flag)


def test_urls_follow_the_endpoint() -> None:
    config = replace(GOOD, base_url="http://h:1/")
    assert config.api_url == "http://h:1/v1/completions"
    assert replace(config, endpoint="chat").api_url == "http://h:1/v1/chat/completions"
    assert config.models_url == "http://h:1/v1/models"
