"""A `pdctl bench --save-requests` result made by the planner instead of a server: the same
workload and arrivals, each request's TTFT and gaps as the virtual clock served them."""

from __future__ import annotations

from typing import Any

from simulator.plan.planner import PlanSetup, Workload, parse_config, run_with_results


def planned_bench(
    model: str, hardware: str, rate: float, workload: Workload, config: str = "1xtp1"
) -> dict[str, Any]:
    _, results = run_with_results(
        PlanSetup(model, hardware, 8), parse_config(config), workload, rate
    )
    requests = []
    for r in results:
        index = int(r.request_id[1:])
        gaps = [gap for gap, count in r.itl_gaps for _ in range(count)]
        requests.append(
            {
                "ok": True,
                "prompt_tokens": workload.input_len,
                "output_tokens": r.output_tokens,
                "ttft": r.ttft,
                "itl": gaps,
                "e2el": r.e2e,
                "start": r.arrival,
                "index": index,
            }
        )
        if r.prefill_s is not None:  # as a pdctl proxy reports a disaggregated request's parts
            requests[-1]["ttft_parts"] = {
                "prefill_ms": r.prefill_s * 1000,
                "transfer_ms": None if r.transfer_s is None else r.transfer_s * 1000,
            }
    return {
        "model_id": model,
        "request_rate": rate,
        "dataset": "random",
        "arrivals": "vllm",
        "num_prompts": workload.num_prompts,
        "input_len": workload.input_len,
        "output_len": workload.output_len,
        "range_ratio": workload.range_ratio,
        "burstiness": workload.burstiness,
        "seed": workload.seed,
        "requests": requests,
    }


def planned_log(
    model: str, hardware: str, rate: float, workload: Workload, config: str = "1xtp1"
) -> list[dict[str, Any]]:
    """The same requests as a pdctl proxy's request log (GET /admin/requests) would list them
    on a wall clock starting at 1e9 s."""
    _, results = run_with_results(
        PlanSetup(model, hardware, 8), parse_config(config), workload, rate
    )
    lines = []
    for r in sorted(results, key=lambda r: r.arrival):
        assert r.ttft is not None and r.e2e is not None
        line: dict[str, Any] = {
            "time": 1e9 + r.arrival,
            "outcome": "ok",
            "prompt_tokens": workload.input_len,
            "output_tokens": r.output_tokens,
            "ttft_ms": r.ttft * 1000,
            "e2e_ms": r.e2e * 1000,
            "prefill": "http://127.0.0.1:8100",
        }
        if r.prefill_s is not None:
            line["prefill_ms"] = r.prefill_s * 1000
            transfer = None if r.transfer_s is None else r.transfer_s * 1000
            line["ttft_parts"] = {"prefill_ms": r.prefill_s * 1000, "transfer_ms": transfer}
        lines.append(line)
    return lines
