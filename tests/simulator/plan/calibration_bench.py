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
