"""ProxySettings (connector/settings/): every setting of one proxy, its type, default, bounds
and help, the rules between fields (each naming the field it is about), and what the proxy's
parts take, built once from the flat fields."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    PlainSerializer,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from connector.legs.retry import RetrySettings
from connector.legs.rewrite import CONNECTORS, MODES
from connector.registry.trust import LOOPBACK, ExpectedInstance
from connector.settings.cli import Cli
from connector.settings.fields import (
    FIRST_BYTE_TIMEOUT_S,
    DecodeTimeout,
    EjectMaxShare,
    FirstByteTimeout,
    HoldDeadline,
    HoldQueue,
    Instances,
    Policy,
    PrefillTimeout,
    RetryAttempts,
    RetryBudgetRatio,
    RetryDeadline,
    SloMs,
)
from connector.settings.parsing import (
    allowlist,
    expected_entries,
    negative_is_none,
    one_of,
    zero_is_none,
)
from domain.kv_connectors import offering, proxy_backend
from domain.measures.slo import DEFAULT_ITL_STAT, ItlStatName, SloTargets, parse_itl_stat
from domain.modes import Mode


class ProxySettings(BaseModel):
    """Every setting of one proxy, in the order `pdctl proxy --help` lists them and a rendered
    command line writes them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(ge=0, le=65535, description="HTTP port of the proxy.")
    host: str = Field("127.0.0.1", description="Address to bind (HTTP and registry).")
    connector: Annotated[str, one_of(CONNECTORS, "connector")] = Field(
        "nixl", description=f"KV connector: {' | '.join(CONNECTORS)}."
    )
    mode: Annotated[str, one_of(MODES, "mode")] = Field(
        "read", description="Mode of the instances given by flag: read | write | colocated."
    )
    registry_port: Annotated[
        int | None,
        BeforeValidator(negative_is_none),
        PlainSerializer(lambda p: -1 if p is None else p),
    ] = Field(
        36367,
        ge=0,
        le=65535,
        description="ZMQ registry port (MoRIIO proxy_ping_port); -1 disables.",
    )
    registry_allow: Annotated[tuple[str, ...], AfterValidator(allowlist)] = Field(
        LOOPBACK,
        description="Address or network that may register over ZMQ, or 'any' (repeat); "
        "default loopback only. Checked against the sender and every address it names.",
    )
    policy: Policy = "round-robin"
    hold_queue: HoldQueue = 256
    hold_deadline: HoldDeadline = 30.0
    prefill_timeout: PrefillTimeout = 120.0
    decode_timeout: DecodeTimeout = 120.0
    first_byte_timeout: FirstByteTimeout = FIRST_BYTE_TIMEOUT_S
    retry_attempts: RetryAttempts = 3
    retry_deadline: RetryDeadline = 30.0
    retry_budget_ratio: RetryBudgetRatio = 0.2
    retry_min_per_s: float = Field(
        2.0, ge=0, le=1000, description="Retries allowed per second whatever the traffic."
    )
    retry_backoff: float = Field(
        0.02, ge=0, le=10, description="Seconds before the second attempt; doubles per attempt."
    )
    retry_burst: Annotated[float, Cli(flag=False)] = Field(
        10.0, ge=1, le=10_000, description="Retry tokens saved at most."
    )
    # Outlier ejection: after eject_after failed legs in a row an instance takes no new request
    # for eject_seconds (doubling per ejection in a row), unless it is the last of its role in
    # its group.
    eject_after: int = Field(
        3, ge=0, description="Failed legs in a row after which an instance is ejected (0: never)."
    )
    eject_seconds: float = Field(
        10.0,
        gt=0,
        description="Seconds an ejected instance takes no request (doubles per ejection).",
    )
    eject_max_share: EjectMaxShare = 0.5
    slo_ttft_ms: SloMs = Field(None, description="TTFT target in ms.")
    slo_itl_ms: SloMs = Field(None, description="ITL target in ms.")
    slo_tpot_ms: SloMs = Field(None, description="TPOT target in ms.")
    itl_slo_stat: ItlStatName = Field(
        DEFAULT_ITL_STAT.value, description="Per-request ITL statistic judged: mean | p99 | max."
    )
    # NIXL bidirectional KV (connector/legs/turn_kv.py): carry a decode's returned params into
    # the conversation's next prefill; they last the decode's decoder_kv_blocks_ttl (480 s:
    # vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default).
    bidirectional_kv: bool = Field(
        False,
        description="NIXL bidirectional KV: a conversation's next prefill pulls the blocks its "
        "last decode kept (the engines' bidirectional_kv_xfer must be on too).",
    )
    kv_blocks_ttl: float = Field(
        480.0,
        gt=0,
        le=86_400,
        description="Seconds a decode keeps a turn's blocks (decoder_kv_blocks_ttl).",
    )
    bidir_max_conversations: int = Field(
        10_000, ge=1, description="Conversations whose KV params the proxy keeps (LRU)."
    )
    # The instances given by flag, in the order a request meets them (E -> P -> D).
    encode: Instances = Field(
        (),
        description="Encode instance URL (repeat): chat images go there before prefill.",
    )
    prefill: Instances = Field(
        (), description="Prefill URL, optionally URL#host:IP,handshake:P,notify:P (repeat)."
    )
    decode: Instances = Field((), description="Decode URL (repeat).")
    instance: Instances = Field(
        (), description="Colocated instance URL (repeat; --mode colocated)."
    )
    render: Instances = Field(
        (),
        description="Render tier URL (repeat): completions are rendered to token ids there.",
    )
    ttft_parts: bool = Field(
        True,
        description="Split each request's TTFT into queue, retry, prefill, transfer and decode.",
    )
    admin_token: Annotated[str | None, Cli(env=True)] = Field(
        None,
        description="Bearer token for /admin (better from the environment, PDCTL_ADMIN_TOKEN: "
        "argv is readable by every local user). Without one, a token is generated and "
        "written to --admin-token-file.",
    )
    admin_token_file: Path | None = Field(
        None,
        description="Where a generated admin token is written (0600); default: "
        "$PDCTL_RUNTIME_DIR (or $XDG_RUNTIME_DIR/pdctl)/proxy-PORT.admin-token.",
    )
    runtime_dir: Annotated[Path | None, Cli(flag=False, env=True)] = Field(
        None, description="Where a standalone proxy keeps its generated admin token."
    )
    # Under `pdctl serve`: the whole registration of every instance the controller launched;
    # anything else is refused. None: a standalone proxy, which believes what /health confirms.
    registry_expected: Annotated[
        tuple[InstanceOf[ExpectedInstance], ...] | None,
        BeforeValidator(expected_entries),
        Cli(hidden=True, env=True, json=True),
    ] = Field(
        None,
        description="JSON list of the registrations to accept, and nothing else (set by "
        "`pdctl serve`, in the environment).",
    )
    registry_max_pending: int = Field(
        16, ge=1, description="New registrations probed at once; more wait for a place."
    )
    registry_max_instances: int = Field(
        256, ge=1, description="Distinct instances the ZMQ registry accepts; more are refused."
    )
    heartbeat_scale: Annotated[float, Cli(hidden=True)] = Field(
        1.0, gt=0, description="Shrink the registry's heartbeat intervals (tests)."
    )
    # A restarted proxy knows no instance until the first heartbeat: for this long after start,
    # while none is known, requests wait (in the hold queue) instead of a 503.
    startup_grace: float = Field(
        5.0,
        ge=0,
        description="Seconds after start that requests wait for the first registration "
        "(registry only; engines re-register within a 3 s heartbeat).",
    )
    max_body_bytes: int = Field(
        64 << 20, ge=1024, description="Largest client request body; larger ones get 413."
    )
    header_timeout: float = Field(
        10.0, gt=0, le=3600, description="Seconds a client has to send a request's whole head."
    )
    body_timeout: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a request's body (then 408).",
    )
    # Generous: an engine's API server busy tokenizing on a loaded host can stall its event
    # loop for seconds.
    health_timeout: float = Field(
        5.0, gt=0, description="Seconds a /health probe may take before it counts as failed."
    )
    health_interval: Annotated[
        float | None,
        BeforeValidator(zero_is_none),
        PlainSerializer(lambda s: 0 if s is None else s),
        Cli(hidden=True),
    ] = Field(5.0, gt=0, description="Seconds between health probes; 0 disables.")
    connect_timeout: Annotated[float, Cli(flag=False)] = Field(
        5.0, gt=0, description="Seconds to connect to an engine."
    )
    loop_lag_interval: Annotated[float, Cli(flag=False)] = Field(
        0.5, gt=0, description="Seconds between event-loop lag samples."
    )
    request_log_size: Annotated[int, Cli(flag=False)] = Field(
        1000, ge=0, description="Recent requests kept for /admin/requests."
    )

    @model_validator(mode="after")
    def _rules_between_fields(self) -> ProxySettings:
        kv = proxy_backend(self.connector)  # one the proxy speaks: checked at its field
        if self.mode == Mode.WRITE and not kv.has_modes:
            raise self.conflict(
                "mode", f"{kv.label} has no write mode: the decode pulls the KV (use read)"
            )
        if self.mode == Mode.COLOCATED and (self.prefill or self.decode):
            field = "prefill" if self.prefill else "decode"
            raise self.conflict(field, "mode colocated takes instance URLs, not prefill/decode")
        if self.mode != Mode.COLOCATED and self.instance:
            raise self.conflict("instance", "colocated instances need mode colocated")
        seen: set[str] = set()
        for field in ("prefill", "decode", "instance"):
            for flag in getattr(self, field):
                if flag.url in seen:
                    raise self.conflict(
                        field, "each instance URL may appear once: one instance has one role"
                    )
                seen.add(flag.url)
        if self.bidirectional_kv and (not kv.bidirectional_kv or self.mode != Mode.READ):
            owner = offering("bidirectional_kv")[0]
            raise self.conflict(
                "bidirectional_kv",
                f"is {owner.label}'s: it needs connector {owner.proxy_name}, mode read",
            )
        return self

    @staticmethod
    def error_field(error: ErrorDetails) -> str:
        """The field one of this model's validation errors is about."""
        return str(error["loc"][0]) if error["loc"] else str(error["ctx"]["field"])

    @staticmethod
    def conflict(field: str, message: str) -> PydanticCustomError:
        """A broken rule between fields, reported at `field` (its error's ctx names it)."""
        return PydanticCustomError(
            "settings_conflict", "{field}: {message}", {"field": field, "message": message}
        )

    # What the proxy's parts take, built once from the flat fields.
    @cached_property
    def slo(self) -> SloTargets:
        stat = parse_itl_stat(self.itl_slo_stat)
        return SloTargets(self.slo_ttft_ms, self.slo_itl_ms, self.slo_tpot_ms, stat)

    @cached_property
    def retry(self) -> RetrySettings:
        return RetrySettings(
            attempts=self.retry_attempts,
            deadline_s=self.retry_deadline,
            ratio=self.retry_budget_ratio,
            min_per_s=self.retry_min_per_s,
            burst=self.retry_burst,
            backoff_s=self.retry_backoff,
            backoff_max_s=max(0.5, self.retry_backoff),
        )

    @property
    def default_registry_mode(self) -> str:
        """The mode of a registration that names none: the flag's, read when colocated."""
        return self.mode if self.mode != Mode.COLOCATED else Mode.READ.value
