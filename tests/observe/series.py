"""Scripted /metrics texts for the observe tests: a proxy and an engine whose cumulative
counters the test sets directly."""

from __future__ import annotations

from domain.measures.latency_buckets import PROXY_TTFT_BUCKETS as TTFT_BUCKETS


def proxy_text(
    ttft_counts: dict[float, int] | None = None,
    ok: int = 0,
    failed: int = 0,
    rejected: int = 0,
    met_all: int = 0,
    in_flight: int = 0,
    cancelled: int = 0,
    invalid: int = 0,
    arrival_gaps: int | None = None,
) -> str:
    """A proxy exposition; `ttft_counts` maps a bucket bound to observations in it."""
    ttft_counts = ttft_counts or {}
    lines = ["# TYPE pdctl_proxy_ttft_seconds histogram"]
    cumulative = 0
    for bound in TTFT_BUCKETS:
        cumulative += ttft_counts.get(bound, 0)
        lines.append(f'pdctl_proxy_ttft_seconds_bucket{{le="{bound}"}} {cumulative}')
    lines += [
        f'pdctl_proxy_ttft_seconds_bucket{{le="+Inf"}} {cumulative}',
        f"pdctl_proxy_ttft_seconds_count {cumulative}",
        "pdctl_proxy_ttft_seconds_sum 0.0",
        "# TYPE pdctl_proxy_requests_total counter",
    ]
    for outcome, n in (
        ("ok", ok),
        ("failed", failed),
        ("rejected", rejected),
        ("cancelled", cancelled),
        ("invalid", invalid),
    ):
        lines.append(f'pdctl_proxy_requests_total{{outcome="{outcome}"}} {n}')
    lines += [
        "# TYPE pdctl_proxy_slo_met_total counter",
        f'pdctl_proxy_slo_met_total{{target="all"}} {met_all}',
        "# TYPE pdctl_proxy_in_flight_requests gauge",
        f"pdctl_proxy_in_flight_requests {in_flight}",
    ]
    if arrival_gaps is not None:
        lines += [
            "# TYPE pdctl_proxy_arrival_gaps_total counter",
            f"pdctl_proxy_arrival_gaps_total {arrival_gaps}",
        ]
    return "\n".join(lines) + "\n"


def engine_text(
    external_tokens: int = 0,
    running: int = 0,
    waiting: int = 0,
    usage: float = 0.0,
    nixl_bytes: float | None = None,
    nixl_times: dict[float, int] | None = None,
    connector: str = "nixl",  # the transfer families' prefix: nixl | moriio
    local_tokens: int = 5,
    cache_hit_tokens: int = 0,
    first_tokens: int | None = None,  # vllm:time_to_first_token_seconds_count
    failed_transfers: int | None = None,
) -> str:
    labels = 'engine="0",model_name="tiny"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{labels}}} {usage}",
        "# TYPE vllm:prompt_tokens_by_source_total counter",
        f'vllm:prompt_tokens_by_source_total{{{labels},source="local_compute"}} {local_tokens}',
        f'vllm:prompt_tokens_by_source_total{{{labels},source="local_cache_hit"}} '
        f"{cache_hit_tokens}",
        f'vllm:prompt_tokens_by_source_total{{{labels},source="external_kv_transfer"}} '
        f"{external_tokens}",
    ]
    if first_tokens is not None:
        lines += [
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {first_tokens}',
            f"vllm:time_to_first_token_seconds_count{{{labels}}} {first_tokens}",
            f"vllm:time_to_first_token_seconds_sum{{{labels}}} 0.0",
        ]
    if failed_transfers is not None:
        lines += [
            f"# TYPE vllm:{connector}_num_failed_transfers_total counter",
            f"vllm:{connector}_num_failed_transfers_total{{{labels}}} {failed_transfers}",
        ]
    if nixl_bytes is not None:
        times = nixl_times or {}
        lines.append(f"# TYPE vllm:{connector}_xfer_time_seconds histogram")
        cumulative = 0
        for bound in (0.005, 0.01, 0.025, 0.05, 0.1):
            cumulative += times.get(bound, 0)
            lines.append(
                f'vllm:{connector}_xfer_time_seconds_bucket{{{labels},le="{bound}"}} {cumulative}'
            )
        lines += [
            f'vllm:{connector}_xfer_time_seconds_bucket{{{labels},le="+Inf"}} {cumulative}',
            f"vllm:{connector}_xfer_time_seconds_count{{{labels}}} {cumulative}",
            f"vllm:{connector}_xfer_time_seconds_sum{{{labels}}} 0.0",
            f"# TYPE vllm:{connector}_bytes_transferred histogram",
            f'vllm:{connector}_bytes_transferred_bucket{{{labels},le="+Inf"}} {cumulative}',
            f"vllm:{connector}_bytes_transferred_count{{{labels}}} {cumulative}",
            f"vllm:{connector}_bytes_transferred_sum{{{labels}}} {nixl_bytes}",
        ]
    return "\n".join(lines) + "\n"
