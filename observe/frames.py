"""The live frame: what the dashboard receives for one deployment, once a second, over its
websocket (`/ws/deployments/{name}`), and what the history store keeps (downsampled).

This module is the contract between observe/ (which builds frames) and the pages (which
draw them). Times are seconds unless a key says `_ms`. Figures from the stand-in carry
`simulated: true`; figures computed rather than read carry a `source` saying how.

The frame is `Frame` below, as typed structures (TypedDicts serialize as they are); each
field's comment says where it comes from.

The websocket sends, in order: {"type": "history", "deployment", "window", "points": [Point,
...]} (the last 30 min, oldest first), the latest frame if there is one, then a frame every
scrape (1 s) and {"type": "event", "id", "ts", "actor", "kind", "deployment", "message",
"detail"} (as /api/events) whenever one is recorded for the deployment. Query: `window`
(10s | 1m | 5m), `token` (or the session cookie). Close codes: 4401 no valid token, 4404 no
such deployment, 4400 bad window, 1013 too many live sockets. GET
/api/deployments/{name}/history?window=1h gives {"deployment", "window", "points": [Point]}.
"""

# No `from __future__ import annotations` here: TypedDict must see NotRequired at runtime.
from typing import Any, Literal, NotRequired, TypedDict

Window = Literal["10s", "1m", "5m"]


class Histogram(TypedDict):
    buckets: list[list[float | None]]  # [[upper bound s, count in window], ...], non-cumulative,
    #                             +Inf last with its bound as null (JSON has no Infinity)
    count: float
    p50: float | None  # seconds
    p90: float | None
    p99: float | None


class SloShown(TypedDict):
    ttft_ms: float | None
    itl_ms: float | None
    itl_stat: str  # mean | p99 | max (domain/measures/slo.py)


class Outcomes(TypedDict):  # per second, by how the proxy ended each request
    ok: float
    failed: float  # a leg failed or timed out (502, 504, an error event in the stream)
    rejected: float  # nothing could serve it (503)
    cancelled: float  # the client hung up before [DONE]
    invalid: float  # the client's own error (400, 413): not the deployment's traffic


class Requests(TypedDict):
    """Every request the proxy ended in the window counts (observe/sections/traffic.py requests):
    ok,
    failed, rejected and cancelled; only a client's invalid request is left out. A canary
    never counts."""

    # share of those requests meeting every target (a rejected or failed one meets none); 0.0
    # when requests arrived and none ended nor got a first token; None: no traffic
    slo_attainment: float | None
    request_goodput: float | None  # requests meeting every target per second
    request_rate: float | None  # requests per second the proxy ended, rejected ones too
    rejected_share: float | None  # of those requests, the share rejected (None: none ended)
    outcomes: Outcomes


class KvTransfer(TypedDict):
    bytes_per_s: float | None  # KV moved between instances
    # nixl | moriio: the engine's own figures (vllm:nixl_*, newer vLLM's vllm:moriio_*);
    # derived: external prompt tokens x KV B/token, only when no engine exports its own
    # A connector's metric prefix (domain/kv_connectors/: its engine's own figures),
    # "derived" (prompt tokens x KV bytes per token), or None.
    source: str | None
    xfer_p50_ms: float | None  # the engine's figures only (derived: None)
    xfer_p99_ms: float | None


class Arrivals(TypedDict):
    """Client requests arriving at the proxy (all None: it exports no arrival gaps)."""

    per_s: float | None  # offered, finished or not
    gaps: int | None  # gaps between consecutive arrivals ending in the window
    # Gamma shape of those gaps, mean^2 / variance (1 = Poisson, < 1 burstier; None: fewer
    # than 20 gaps, or no spread). The gap ending the window's first arrival counts whole,
    # so load that starts after an idle spell reads bursty.
    burstiness: float | None
    # Tokens those requests bring, as the proxy judged them at arrival
    # (connector/measure/demand.py): prompt tokens, and the answer tokens they will cost
    prompt_tokens_per_s: float | None
    output_tokens_per_s: float | None


class Interference(TypedDict):  # from the proxy (connector/measure/interference.py)
    spikes_per_s: float | None  # token gaps above twice their request's median
    at_prefill_share: float | None  # of those, ended as another request's prefill finished
    #                                 on the same instance (0.0: no spikes)


class EngineWork(TypedDict):  # the engines' own counters over the window
    prompt_tokens_per_request: float | None  # prefill and colocated instances
    prefix_hit_rate: float | None  # vllm:prefix_cache_hits / _queries, same instances
    output_tokens_per_request: float | None  # decode and colocated instances
    cpu_cores_max: float | None  # busiest engine instance's serving process
    render_instances: int  # render tier instances up (0: no render tier)
    render_cpu_cores_max: float | None  # the busiest render instance's whole process


class InstanceRow(TypedDict):
    name: str
    role: str | None
    state: str | None
    url: str | None
    address: str | None  # its node's address when placed on a cluster
    node: str | None  # the cluster's id of that node
    mode: str | None
    up: bool
    running: int | None  # None while its /metrics is not scraped (down)
    waiting: int | None
    kv_cache_usage: float | None
    loop_lag_s: float | None


class PdDecode(TypedDict):
    """One decode instance in the "is PD happening?" check (observe/sections/pd_check.py)."""

    instance: str
    # ok | recomputing | idle (too little traffic to judge) | unmeasured (no
    # prompt_tokens_by_source) | down (no scrape) | paused (a rollout: no onset judged);
    # recomputing holds through idle and down
    status: str
    share: float | None  # prompt tokens by KV transfer / (by transfer + computed), 10 s
    since: float | None  # epoch seconds the recomputing began (None: not recomputing)
    prompt_tokens: float | None  # transferred + computed in the window (cache hits apart)
    cache_hit_tokens: float | None  # prefix-cache hits: not recomputation
    requests: float | None  # first tokens in the window
    failed_transfers: float | None  # vllm:nixl_/moriio_num_failed_transfers in the window


class PdHappening(TypedDict):
    applies: bool  # False: colocated (no hand-off), or not checked yet
    why: str | None  # why it does not apply, or why there is nothing to show
    rule: dict[str, Any]  # window, min_requests, min_prompt_tokens, collapse_below, recover_at
    decodes: list[PdDecode]
    recomputing: list[str]  # the decodes recomputing now


class ChangeMark(TypedDict):
    """A rollout that ran inside a window or its settling (observe/sections/evidence.py)."""

    id: str
    kind: str  # apply | restart | switch | role_move | advisor | undo | rollback
    strategy: str
    running: bool
    started_at: float  # epoch seconds
    ended_at: float | None  # None while it runs


class Evidence(TypedDict):
    """Is this window evidence to decide from (domain/measures/evidence.py)? The advisor and the
    autopilot decide nothing from a window that is not, and say why."""

    # Client requests that reached the proxy in the window: ended (every outcome) or arrived,
    # whichever is more (its canaries and pair probes never count); None: no counts
    real_requests: int | None
    min_requests: int  # domain/measures/evidence.py MIN_REAL_REQUESTS
    changes: list[ChangeMark]  # rollouts that ran in the window or its settling, newest first
    disturbed: bool  # a change ran in the window or ended within its settling
    enough: bool  # not disturbed and at least min_requests real requests
    why: str | None  # "not enough evidence (...)" when not enough


class ProxyRow(TypedDict):
    up: bool
    in_flight: int
    held: int
    loop_lag_s: float | None


class Headline(TypedDict):
    """The few numbers a time series keeps (percentiles in seconds)."""

    ttft_count: float
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    itl_count: float
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    slo_attainment: float | None
    request_goodput: float | None
    request_rate: float | None
    rejected_share: float | None
    rejected_rate: float | None  # outcomes.rejected
    kv_bytes_per_s: float | None


class Point(Headline):
    """One history point per deployment per history_step_s (5 s), the 10 s window's."""

    ts: float
    # the frame's kv.xfer_p50_ms / xfer_p99_ms (the engine's vllm:nixl_/moriio_xfer_time_seconds,
    # what `pdctl top` prints), so the page's KV transfer time chart has a past as well
    xfer_p50_ms: float | None
    xfer_p99_ms: float | None
    running: int
    waiting: int
    kv_cache_usage: float | None
    # a change ran in this point's window (observe/sections/evidence.py)
    disturbed: NotRequired[bool]


class Frame(Requests):
    """What the dashboard receives for one deployment, once a second."""

    type: Literal["frame"]
    deployment: str
    ts: float  # epoch seconds of the scrape
    window: Window  # what the histograms and rates cover (the socket's ?window=, default 1m)
    simulated: bool  # engine is the stand-in
    slo: SloShown
    ttft: Histogram  # client-side, from the proxy (pdctl_proxy_ttft_seconds)
    itl: Histogram  # client-side, from the proxy (pdctl_proxy_itl_seconds)
    # vllm:time_to_first_token_seconds / inter_token_latency_seconds summed over the decode
    # and colocated instances that answered (None: none did)
    engine_ttft: Histogram | None
    engine_itl: Histogram | None
    kv: KvTransfer
    running: int  # summed over engine instances
    waiting: int
    kv_cache_usage: float | None  # max over instances, 0..1
    # chat requests carrying an earlier answer, of all chat requests (None: none)
    multi_turn_share: float | None
    # of the prompt tokens prefills saw, the share bidirectional KV pulled back (None: none)
    prompt_saved_share: float | None
    arrivals: Arrivals
    interference: Interference
    engines: EngineWork
    instances: list[InstanceRow]
    proxy: ProxyRow
    # "Is PD happening?" per decode over the last 10 s whatever the frame's window (the
    # check keeps state: onset and recovery lines, observe/sections/pd_check.py)
    pd: PdHappening
    # The correctness canary's last verdict and counts (observe/canary/state.py section)
    canary: NotRequired[dict[str, Any]]
    # The P:D autopilot's mode, last decision and move, and its one `line`, while one steers
    # the deployment (services/autopilot_loop.py section, added through Observer.sections)
    autopilot: NotRequired[dict[str, Any]]
    windows: NotRequired[dict[str, Headline]]  # every window's headline
    # Whether this window is evidence to decide from: real requests, changes that ran
    # (observe/sections/evidence.py, added by the scraper, which reads the rollouts)
    evidence: NotRequired[Evidence]
    # {"revision", "modes"} the supervisor runs the deployment at (observe/sections/serving.py)
    serving: NotRequired[dict[str, Any]]
    # Where ttft, itl and slo_attainment come from: "proxy" (pdctl's, the client's view) or
    # "engines" (an attached deployment behind another proxy: observe/attached/watch.py)
    latency_source: NotRequired[str]
    # An attached deployment's discovered groups: each one's source, the instances it found
    # (name -> URL), the addresses it skipped and why, its last error (observe/discovery/)
    discovery: NotRequired[list[dict[str, Any]]]
    # An attached deployment's mean TTFT parts from its engines' own histograms, when the
    # proxy is not pdctl's (observe/attached/ttft.py): {"source", "parts", "sum_ms"}
    ttft_breakdown: NotRequired[dict[str, Any]]


class HistoryMessage(TypedDict):
    type: Literal["history"]
    deployment: str
    window: Window
    points: list[Point]  # the last 30 min, oldest first


class EventMessage(TypedDict):
    type: Literal["event"]
    id: int
    ts: str  # ISO 8601 UTC, as /api/events gives it
    actor: str
    kind: str
    deployment: str | None
    message: str
    detail: Any


WINDOWS: tuple[Window, ...] = ("10s", "1m", "5m")
WINDOW_SECONDS: dict[str, float] = {"10s": 10.0, "1m": 60.0, "5m": 300.0}
