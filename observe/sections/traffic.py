"""What the proxy's counters say over one window, as a client sees it: requests and their
outcomes, SLO attainment, arrivals and their burstiness, multi-turn share, ITL spikes. Pure
arithmetic over a window's increases (observe/metrics/windows.py Delta)."""

from __future__ import annotations

from observe.frames import Arrivals, Interference, Requests
from observe.metrics.samples import total
from observe.metrics.windows import Delta

# Below this many gaps the moment estimate is too noisy to act on; at 20, a Poisson stream's
# shape still reads below the advisor's "bursty" line (0.5) about 2% of the time.
MIN_ARRIVAL_GAPS = 20

# The outcomes a client counts (connector/measure/metrics.py OUTCOMES): every one but
# "invalid", a request the client itself got wrong (400, 413), which says nothing of the
# deployment. A cancelled request is one whose client gave up, most often on time.
COUNTED_OUTCOMES = ("ok", "failed", "rejected", "cancelled")
ALL_OUTCOMES = (*COUNTED_OUTCOMES, "invalid")


def requests(delta: Delta, first_tokens: float | None = None) -> Requests:
    """slo_attainment, request_goodput, request_rate and outcomes from the proxy's counters,
    over every request that ended as a client sees it: met{target="all"} out of ok + failed +
    rejected + cancelled, as `vllm bench serve` counts a failed request. `first_tokens` is
    how many first tokens the decode engines gave in the window (see `attainment`)."""
    counts = delta.counts

    def outcome(name: str) -> float:
        return total(counts, "pdctl_proxy_requests_total", outcome=name) or 0.0

    ended = {name: outcome(name) for name in ALL_OUTCOMES}
    counted = sum(ended[name] for name in COUNTED_OUTCOMES)
    met = total(counts, "pdctl_proxy_slo_met_total", target="all")
    present = met is not None
    # arrivals count every client request, a client's invalid one too (it ends at once)
    arrived = (total(counts, "pdctl_proxy_arrival_gaps_total") or 0.0) - ended["invalid"]
    per_s = {name: delta.rate(n) or 0.0 for name, n in ended.items()}
    return {
        "slo_attainment": attainment(met, counted, arrived, first_tokens) if present else None,
        "request_goodput": delta.rate(met) if present else None,
        "request_rate": delta.rate(counted) if present else None,
        "rejected_share": ended["rejected"] / counted if present and counted > 0 else None,
        "outcomes": {
            "ok": per_s["ok"],
            "failed": per_s["failed"],
            "rejected": per_s["rejected"],
            "cancelled": per_s["cancelled"],
            "invalid": per_s["invalid"],
        },
    }


def attainment(
    met: float | None, ended: float, arrived: float, first_tokens: float | None
) -> float | None:
    """Met out of the requests that ended. None ended but some arrived: 0.0 (an outage whose
    requests hang or queue is a dip, not a gap), unless an engine gave first tokens in the
    window (long answers still streaming: nothing to judge yet). Nothing arrived: None."""
    if ended > 0:
        return (met or 0.0) / ended
    if arrived > 0 and not first_tokens:
        return 0.0
    return None


def multi_turn_share(delta: Delta) -> float | None:
    """Of the chat requests the proxy admitted, the share continuing a conversation (None:
    no chat request in the window; completions cannot say)."""
    follow_up = total(delta.counts, "pdctl_proxy_turns_total", kind="follow_up") or 0.0
    first = total(delta.counts, "pdctl_proxy_turns_total", kind="first") or 0.0
    return follow_up / (first + follow_up) if first + follow_up > 0 else None


def arrivals(delta: Delta) -> Arrivals:
    """Client requests arriving at the proxy: their rate, and the count and gamma shape of the
    gaps between them (None when the proxy exports no arrival counters)."""
    counts = delta.counts
    gaps = total(counts, "pdctl_proxy_arrival_gaps_total")
    seconds = total(counts, "pdctl_proxy_arrival_gap_seconds_total")
    squares = total(counts, "pdctl_proxy_arrival_gap_seconds_squared_total")
    shape = (
        None
        if gaps is None or seconds is None or squares is None
        else gamma_shape(gaps, seconds, squares)
    )
    return {
        "per_s": delta.rate(gaps),
        "gaps": None if gaps is None else round(gaps),
        "burstiness": shape,
        "prompt_tokens_per_s": delta.rate(
            total(counts, "pdctl_proxy_arrived_tokens_total", kind="prompt")
        ),
        "output_tokens_per_s": delta.rate(
            total(counts, "pdctl_proxy_arrived_tokens_total", kind="output")
        ),
    }


def gamma_shape(n: float, seconds: float, squares: float) -> float | None:
    """Method-of-moments gamma shape of `n` gaps from their sum and sum of squares: mean^2 /
    variance (1 = Poisson, < 1 burstier, > 1 more regular); None below MIN_ARRIVAL_GAPS gaps
    or with no spread."""
    if n < MIN_ARRIVAL_GAPS:
        return None
    mean = seconds / n
    variance = squares / n - mean * mean
    # Equal gaps leave a few ulps of rounding in the subtraction, not a spread.
    if variance <= 1e-9 * mean * mean:
        return None
    return mean * mean / variance


def interference(delta: Delta) -> Interference:
    """ITL spikes the proxy saw (gaps above twice their request's median) and the share that
    ended as another request's prefill finished on the same instance."""
    spikes = total(delta.counts, "pdctl_proxy_itl_spikes_total")
    at_prefill = total(delta.counts, "pdctl_proxy_itl_spikes_at_prefill_total")
    return {
        "spikes_per_s": delta.rate(spikes),
        "at_prefill_share": at_prefill / spikes
        if spikes and at_prefill is not None
        else (0.0 if spikes == 0 else None),
    }
