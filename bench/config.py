"""The settings of one `pdctl bench` invocation and their checks.

Every check names the flag at fault, so the CLI can print one plain line instead of a
traceback. Pure: no I/O here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bench.records import ITL_STATS, SloTargets
from domain.measures.slo import ItlStat
from domain.workload.datasets import DATASETS

ENDPOINTS = ("completions", "chat")
# vllm (the default): the times `vllm bench serve --seed S` offers at, which `pdctl plan`
# replays too (domain/workload/vllm_arrivals.py); pdctl: free seeded gamma gaps
# (domain/workload/arrivals.py), whose realized rate over a short run wanders from the one asked for
ARRIVALS = ("pdctl", "vllm")
MAX_WORKERS = 64


class BenchConfigError(ValueError):
    """A flag has a value the bench cannot use; `flag` is the flag as typed on the CLI."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


@dataclass(frozen=True)
class BenchConfig:
    base_url: str
    request_rates: tuple[float, ...] = (math.inf,)
    num_prompts: int = 100
    input_len: int = 1024
    output_len: int = 128
    range_ratio: float = 0.0
    dataset: str = "random"
    prefix_len: int = 256
    num_prefixes: int = 1
    turns: int = 4
    endpoint: str = "completions"
    model: str | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    slo: SloTargets = field(default_factory=SloTargets)
    goodput_share: float = 0.9
    timeout: float = 300.0
    ignore_eos: bool = True
    prompt_token_ids: bool = False
    # a model's tokenizer.json (or its folder): prompts in its tokens (bench/model_prompts.py)
    tokenizer: str | None = None
    arrivals: str = "vllm"
    workers: int = 1
    # extra request headers (`--header KEY=VALUE`, as `vllm bench serve --header`)
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def api_url(self) -> str:
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path

    @property
    def models_url(self) -> str:
        return self.base_url.rstrip("/") + "/v1/models"


def parse_rates(text: str) -> tuple[float, ...]:
    """`--request-rate` as typed: one rate or a comma list, each a positive number or `inf`."""
    rates = []
    for piece in text.split(","):
        piece = piece.strip()
        try:
            rate = float(piece)
        except ValueError:
            raise BenchConfigError(
                "--request-rate", f"{piece!r} is not a number or 'inf'"
            ) from None
        if math.isnan(rate) or rate <= 0:
            raise BenchConfigError("--request-rate", f"must be > 0 or 'inf', got {piece}")
        rates.append(rate)
    return tuple(rates)


def parse_headers(items: list[str]) -> tuple[tuple[str, str], ...]:
    """`--header KEY=VALUE`, repeated: the extra headers each request carries."""
    headers = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise BenchConfigError("--header", f"expected KEY=VALUE, got {item!r}")
        headers.append((key.strip(), value))
    return tuple(headers)


def parse_itl_stat(text: str) -> ItlStat:
    if text not in ITL_STATS:
        raise BenchConfigError(
            "--itl-slo-stat", f"must be one of {', '.join(ITL_STATS)}, got {text!r}"
        )
    return ItlStat(text)


def validate(config: BenchConfig) -> BenchConfig:
    """Raise BenchConfigError for the first flag that is out of range; return the config."""
    url = urlsplit(config.base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise BenchConfigError("--base-url", f"expected http://host:port, got {config.base_url!r}")
    try:
        url.port  # noqa: B018 - urlsplit checks the port only when asked
    except ValueError:
        raise BenchConfigError("--base-url", f"bad port in {config.base_url!r}") from None
    _choice("--endpoint", config.endpoint, ENDPOINTS)
    _choice("--dataset", config.dataset, DATASETS)
    _choice("--arrivals", config.arrivals, ARRIVALS)
    if config.arrivals == "vllm" and not 0 <= config.seed < 2**32:
        raise BenchConfigError(
            "--seed", f"must be in [0, 2**32) with --arrivals vllm, got {config.seed}"
        )
    if not 1 <= config.workers <= MAX_WORKERS:
        raise BenchConfigError("--workers", f"must be in [1, {MAX_WORKERS}], got {config.workers}")
    for flag, value in (
        ("--num-prompts", config.num_prompts),
        ("--input-len", config.input_len),
        ("--output-len", config.output_len),
        ("--prefix-len", config.prefix_len),
        ("--num-prefixes", config.num_prefixes),
        ("--turns", config.turns),
    ):
        _at_least_one(flag, value)
    if config.max_concurrency is not None:
        _at_least_one("--max-concurrency", config.max_concurrency)
        if config.max_concurrency < config.workers:
            raise BenchConfigError(
                "--max-concurrency", f"must be >= --workers ({config.workers}): it is split"
            )
    if not 0 <= config.range_ratio < 1:
        raise BenchConfigError("--range-ratio", f"must be in [0, 1), got {config.range_ratio}")
    _positive("--burstiness", config.burstiness)
    _positive("--timeout", config.timeout)
    for flag, target in (
        ("--slo-ttft-ms", config.slo.ttft_ms),
        ("--slo-itl-ms", config.slo.itl_ms),
        ("--slo-tpot-ms", config.slo.tpot_ms),
    ):
        if target is not None:
            _positive(flag, target)
    if not 0 < config.goodput_share <= 1:
        raise BenchConfigError("--goodput-share", f"must be in (0, 1], got {config.goodput_share}")
    if config.prompt_token_ids and config.endpoint != "completions":
        raise BenchConfigError("--prompt-token-ids", "works only with --endpoint completions")
    if config.tokenizer is not None and config.dataset != "random":
        raise BenchConfigError("--tokenizer", "works only with --dataset random")
    return config


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise BenchConfigError(flag, f"must be one of {', '.join(allowed)}, got {value!r}")


def _at_least_one(flag: str, value: int) -> None:
    if value < 1:
        raise BenchConfigError(flag, f"must be >= 1, got {value}")


def _positive(flag: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise BenchConfigError(flag, f"must be a positive number, got {value}")
