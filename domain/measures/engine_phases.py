"""Where an engine's requests spent their time, from vLLM's own histograms: queued (arrival
to scheduled), prefill (scheduled to first token), decode (first token to the end), and the
engine's TTFT. Two scrapes of /metrics around a bench run give each phase's mean over the
run's requests; `pdctl calibrate` reads them to separate the TTFT's part outside the engine
(HTTP, tokenizing, streaming) from the engine's. Pure: Prometheus text in, means out."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# vLLM's histogram per phase (the stand-in exports the same names).
PHASES = {
    "queue_s": "vllm:request_queue_time_seconds",
    "prefill_s": "vllm:request_prefill_time_seconds",
    "decode_s": "vllm:request_decode_time_seconds",
    "engine_ttft_s": "vllm:time_to_first_token_seconds",
}

Totals = dict[str, tuple[float, float]]  # phase -> (sum, count) over every label set


def phase_totals(text: str) -> Totals:
    """Each phase histogram's sum and count, summed over its label sets; phases the text
    lacks (a proxy's /metrics, not an engine's) are left out."""
    wanted = {name: phase for phase, name in PHASES.items()}
    sums: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        phase = wanted.get(family.name) or wanted.get(f"vllm:{family.name}")
        if phase is None:
            continue
        for sample in family.samples:
            part = sums.setdefault(phase, [0.0, 0.0])
            if sample.name.endswith("_sum"):
                part[0] += sample.value
            elif sample.name.endswith("_count"):
                part[1] += sample.value
    return {phase: (s, c) for phase, (s, c) in sums.items()}


def phase_means(before: Totals, after: Totals) -> dict[str, float]:
    """Mean seconds per request of each phase between two scrapes, with `requests`: how
    many the engine finished (phases with no new request are left out)."""
    out: dict[str, float] = {}
    for phase, (total, count) in after.items():
        old_total, old_count = before.get(phase, (0.0, 0.0))
        if count - old_count > 0:
            out[phase] = (total - old_total) / (count - old_count)
            if phase == "prefill_s":
                out["requests"] = count - old_count
    return out
