"""What counts as evidence for a decision made from live measurements (the advisor's
proposals, observe/advice/; the P:D autopilot, controller/autopilot/decide.py), said once.

A window is evidence when real clients sent enough requests through it and no change ran in
it. Real: what the proxy counts (requests it ended, every outcome: ok, failed, rejected, or
the requests that arrived, whichever is more); the
control plane's own canaries and pair probes carry `X-Pdctl-Canary` (domain/canary_marks.py)
and are never counted there, whatever the engines' own counters saw of them. A change: any
rollout but a first start (apply, restart, switch, role move, advisor, undo, rollback), while
it runs and for AFTER_CHANGE_S after it ends (the queue a hold built is still draining).
"""

# Fewer real requests than this in a window and a percentile or a mean is one or two requests'
# luck: at 20, a p99 is the slowest request and a mean of prompt lengths is still a rough
# figure, but a window of canaries alone (0 real) or a trickle cannot pass for a workload.
MIN_REAL_REQUESTS = 20
AFTER_CHANGE_S = 10.0  # a hold's queue drains and the routes settle within a 10 s frame
NOT_A_CHANGE = ("start",)  # nothing served before a first start: no earlier traffic mixed in


def not_enough(why: str) -> str:
    """The one wording the API, `pdctl advise`, the page and the autopilot use."""
    return f"not enough evidence ({why})"
