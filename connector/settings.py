"""The proxy's settings, declared once: `pdctl proxy`'s flags (connector/flags.py), a spec's
proxy section (controller/spec/deployment.py) and the rendered command line all come from here.

Each field is `--field-name` on the command line, with its type, default, bounds and help
(`description`). Fields marked `Cli(env=True)` are also read from `PDCTL_<FIELD_NAME>`
(`read_settings`), so secrets and hand-overs stay out of argv; a `Cli(flag=False)` field has
no flag at all. Rules between fields are checked by one model validator, each naming the
field it is about (`ProxySettings.conflict`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    PlainSerializer,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from connector.legs.retry import RetrySettings
from connector.legs.rewrite import CONNECTORS, MODES
from connector.pool.policy import POLICIES
from connector.registry.trust import LOOPBACK, Expectations, ExpectedInstance, SenderAllowlist
from domain.kv_connectors import offering, proxy_backend
from domain.modes import Mode
from domain.slo import DEFAULT_ITL_STAT, ItlStatName, SloTargets, parse_itl_stat

ENV_PREFIX = "PDCTL_"


@dataclass(frozen=True, slots=True)
class Cli:
    """How a field meets the world beyond Python: a flag (`--field-name`, `hidden` from
    --help) or none, whether PDCTL_<FIELD_NAME> sets it when the flag is not given, and
    whether a list is one JSON text rather than a repeated flag."""

    flag: bool = True
    hidden: bool = False
    env: bool = False
    json: bool = False


def cli_of(field: FieldInfo) -> Cli:
    return next((m for m in field.metadata if isinstance(m, Cli)), Cli())


@dataclass(frozen=True, slots=True)
class FlagInstance:
    """An instance given on the command line: `URL[#host:IP,handshake:P,notify:P]`."""

    url: str
    zmq_address: str | None = None

    @classmethod
    def parse(cls, text: str) -> FlagInstance:
        url, _, zmq = text.partition("#")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"instance URL must start with http:// or https://: {text!r}")
        return cls(url.rstrip("/"), zmq or None)

    @property
    def text(self) -> str:
        return f"{self.url}#{self.zmq_address}" if self.zmq_address else self.url


def _instance(value: object) -> object:
    return FlagInstance.parse(value) if isinstance(value, str) else value


def _one_of(known: tuple[str, ...], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if value not in known:
            raise ValueError(f"unknown {what} {value!r}; expected one of {known}")
        return value

    return AfterValidator(check)


def _allowlist(networks: tuple[str, ...]) -> tuple[str, ...]:
    try:
        SenderAllowlist(networks)
    except ValueError as exc:  # its message names the flag; the field is named by the error
        raise ValueError(str(exc).removeprefix("--registry-allow: ")) from None
    return networks


def _expected(value: object) -> object:
    """PDCTL_REGISTRY_EXPECTED's JSON (as `pdctl serve` hands it over) -> the entries."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return Expectations.from_json(json.loads(value)).entries()
        except RecursionError:
            raise ValueError("nested too deeply") from None
    return value


def _negative_is_none(value: object) -> object:
    return None if isinstance(value, int | float) and value < 0 else value


def _zero_is_none(value: object) -> object:
    return None if value == 0 else value


# An instance URL flag: text on the command line, a FlagInstance inside, text again in argv.
InstanceUrl = Annotated[
    InstanceOf[FlagInstance], BeforeValidator(_instance), PlainSerializer(lambda f: f.text)
]
Instances = tuple[InstanceUrl, ...]

# The types of the settings a deployment spec's proxy section also sets (ProxyConfig in
# controller/spec/deployment.py takes them, bounding a few more tightly).
Policy = Annotated[
    str,
    _one_of(POLICIES, "policy"),
    Field(description="Pair selection: round-robin | least-tokens."),
]
HoldQueue = Annotated[
    int, Field(ge=0, description="Requests held at most while a group is paused.")
]
HoldDeadline = Annotated[float, Field(ge=0, description="Seconds a held request waits.")]
PrefillTimeout = Annotated[float, Field(gt=0, description="Seconds for the prefill leg.")]
DecodeTimeout = Annotated[
    float, Field(gt=0, description="Longest silence (s) between two decode chunks.")
]
# A leg (prefill or decode) waiting this long for its first byte (a decode in write mode:
# counted from the prefill's answer), while its instance answered and streamed nothing on any
# request either, is hung: with a spare, the request is tried elsewhere and the instance
# ejected. A busy engine streams or answers its other requests meanwhile, so it cannot fire
# there; an idle-but-for-this-leg one waits this long. Apart from the leg timeouts: a slow
# TTFT is not a hang. 0: no such deadline.
FirstByteTimeout = Annotated[
    float,
    Field(
        ge=0,
        le=3600,
        description="Seconds a prefill or decode leg may wait for its first byte while its "
        "instance answers and streams nothing else, before it counts as hung (retried "
        "elsewhere, the instance ejected, with a spare). 0: only the leg timeouts apply.",
    ),
]
# On by default (issue 39): long enough for a KV pull and a step on a lone request, short
# enough that a retry on the spare still fits the retry deadline and a 30 s client.
FIRST_BYTE_TIMEOUT_S = 10.0
RetryAttempts = Annotated[
    int,
    Field(ge=1, le=10, description="Attempts per request, the first included (1: no retries)."),
]
RetryDeadline = Annotated[
    float,
    Field(gt=0, le=3600, description="Seconds after a request arrived that no new attempt starts."),
]
RetryBudgetRatio = Annotated[
    float,
    Field(ge=0, le=1, description="Retries at most this share of requests (plus the floor)."),
]
# With a spare, a refused connection, garbage or a hang ejects at once; at most this share of
# a role's instances in a group is ejected at a time.
EjectMaxShare = Annotated[
    float,
    Field(
        gt=0,
        le=1,
        description="Largest share of a role's instances in a group ejected at once.",
    ),
]
SloMs = Annotated[float | None, Field(gt=0, allow_inf_nan=False)]


class ProxySettings(BaseModel):
    """Every setting of one proxy, in the order `pdctl proxy --help` lists them and a rendered
    command line writes them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    port: int = Field(ge=0, le=65535, description="HTTP port of the proxy.")
    host: str = Field("127.0.0.1", description="Address to bind (HTTP and registry).")
    connector: Annotated[str, _one_of(CONNECTORS, "connector")] = Field(
        "nixl", description=f"KV connector: {' | '.join(CONNECTORS)}."
    )
    mode: Annotated[str, _one_of(MODES, "mode")] = Field(
        "read", description="Mode of the instances given by flag: read | write | colocated."
    )
    registry_port: Annotated[
        int | None,
        BeforeValidator(_negative_is_none),
        PlainSerializer(lambda p: -1 if p is None else p),
    ] = Field(
        36367,
        ge=0,
        le=65535,
        description="ZMQ registry port (MoRIIO proxy_ping_port); -1 disables.",
    )
    registry_allow: Annotated[tuple[str, ...], AfterValidator(_allowlist)] = Field(
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
        BeforeValidator(_expected),
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
        BeforeValidator(_zero_is_none),
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


class _Environment(BaseSettings):
    # Click's rule, kept: an empty variable counts as unset.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True)


# The fields read from the environment, as text: ProxySettings parses them like a flag's.
_ENV_FIELDS: dict[str, Any] = {
    name: (str | None, None)
    for name, field in ProxySettings.model_fields.items()
    if cli_of(field).env
}
ProxyEnvironment = create_model("ProxyEnvironment", __base__=_Environment, **_ENV_FIELDS)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def read_settings(given: Mapping[str, Any]) -> ProxySettings:
    """The settings from `given` (the command line's values) over the environment's."""
    environment = ProxyEnvironment().model_dump(exclude_none=True)
    return ProxySettings(**{**environment, **given})
