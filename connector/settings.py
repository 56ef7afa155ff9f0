"""The proxy's settings: one frozen object built by the CLI (or a test) for create_app."""

from __future__ import annotations

from dataclasses import dataclass, field

from connector.legs.retry import RetrySettings
from connector.legs.rewrite import check_combination
from connector.pool.policy import POLICIES
from connector.registry.trust import LOOPBACK, ExpectedInstance, SenderAllowlist
from domain.slo import SloTargets


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


@dataclass(frozen=True, slots=True)
class ProxySettings:
    port: int = 8000
    host: str = "127.0.0.1"
    connector: str = "nixl"
    mode: str = "read"  # the mode of the instances given by flag
    prefill: tuple[FlagInstance, ...] = ()
    decode: tuple[FlagInstance, ...] = ()
    instance: tuple[FlagInstance, ...] = ()  # colocated
    encode: tuple[
        FlagInstance, ...
    ] = ()  # encoders of E -> P -> D (connector/dispatch/encoders.py)
    render: tuple[FlagInstance, ...] = ()  # the render tier (connector/dispatch/render_tier.py)
    registry_port: int | None = 36367  # None: no registry; 0: any free port
    default_registry_mode: str = "read"  # for registrations without transfer_mode
    heartbeat_scale: float = 1.0  # tests shrink the 3 s / 5 s heartbeat intervals
    slo: SloTargets = field(default_factory=SloTargets)
    policy: str = "round-robin"
    admin_token: str | None = None
    prefill_timeout: float = 120.0
    decode_timeout: float = 120.0  # longest silence between two decode chunks
    connect_timeout: float = 5.0
    hold_queue: int = 256
    hold_deadline: float = 30.0
    # A restarted proxy knows no instance until the first heartbeat: for this long after
    # start, while none is known, requests wait (in the hold queue) instead of a 503.
    startup_grace: float = 5.0
    # Outlier ejection: after this many failed legs in a row (0: never) an instance takes no
    # new request for eject_seconds (doubling per ejection in a row), unless it is the last of
    # its role in its group.
    eject_after: int = 3
    eject_seconds: float = 10.0
    # With a spare, a refused connection, garbage or a hang ejects at once; at most this share
    # of a role's instances in a group is ejected at a time.
    eject_max_share: float = 0.5
    # A decode leg with no first byte this long after it was sent (write mode: after the
    # prefill answered), while no other stream of its instance moved either, is hung: with a
    # spare, the request is tried elsewhere and the instance ejected. None: only the leg's
    # silence timeout applies. Apart from decode_timeout: a slow TTFT is not a hang.
    first_byte_timeout: float | None = None
    retry: RetrySettings = field(default_factory=RetrySettings)  # connector/legs/retry.py
    health_interval: float | None = 5.0  # None: no active health checks
    # A /health answer slower than this counts as a failed probe. Generous: an engine's API
    # server busy tokenizing on a loaded host can stall its event loop for seconds.
    health_timeout: float = 5.0
    loop_lag_interval: float = 0.5
    request_log_size: int = 1000
    ttft_parts: bool = True  # split each TTFT into its parts (domain/ttft_parts.py)
    # NIXL bidirectional KV (connector/legs/turn_kv.py): carry a decode's returned params into the
    # conversation's next prefill; they last the decode's decoder_kv_blocks_ttl (480 s: vLLM's
    # VLLM_NIXL_ABORT_REQUEST_TIMEOUT default); at most bidir_max_conversations kept.
    bidirectional_kv: bool = False
    kv_blocks_ttl: float = 480.0
    bidir_max_conversations: int = 10_000
    max_body_bytes: int = 64 << 20  # a client body over this is 413
    header_timeout: float = 10.0  # a request head not complete this long after its first byte
    body_timeout: float = 60.0  # a request body not received in this long is 408
    registry_max_instances: int = 256  # distinct instances the ZMQ registry accepts
    registry_max_pending: int = 16  # new claims probed at once; more wait for a place
    registry_allow: tuple[str, ...] = LOOPBACK  # networks that may register
    # Under `pdctl serve`: the whole registration of every instance the controller launched;
    # anything else is refused. None: a standalone proxy, which believes what /health confirms.
    registry_expected: tuple[ExpectedInstance, ...] | None = None

    def __post_init__(self) -> None:
        check_combination(self.connector, self.mode)
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; expected one of {POLICIES}")
        if self.mode == "colocated" and (self.prefill or self.decode):
            raise ValueError("--mode colocated takes --instance URL, not --prefill/--decode")
        if self.mode != "colocated" and self.instance:
            raise ValueError("--instance URL needs --mode colocated")
        urls = [f.url for f in (*self.prefill, *self.decode, *self.instance)]
        if len(urls) != len(set(urls)):
            raise ValueError("each instance URL may appear once: one instance has one role")
        SenderAllowlist(self.registry_allow)  # raises naming --registry-allow
        if bad := self.slo.invalid_target():
            flag = "--slo-" + bad.removesuffix("_ms").replace("_", "-") + "-ms"
            raise ValueError(f"{flag} must be a positive, finite number of ms")
        if self.registry_max_pending < 1:
            raise ValueError("--registry-max-pending must be at least 1")
        if self.max_body_bytes < 1024 or self.registry_max_instances < 1:
            raise ValueError(
                "--max-body-bytes must be at least 1024 and --registry-max-instances at least 1"
            )
        if not (0 < self.header_timeout <= 3600 and 0 < self.body_timeout <= 3600):
            raise ValueError(
                "--header-timeout and --body-timeout must be above 0 and at most 3600 s"
            )
        if self.health_timeout <= 0:
            raise ValueError("--health-timeout must be positive")
        if self.eject_after < 0 or self.eject_seconds <= 0:
            raise ValueError(
                "--eject-after must not be negative and --eject-seconds must be positive"
            )
        if not 0 < self.eject_max_share <= 1:
            raise ValueError("--eject-max-share must be above 0 and at most 1")
        if self.first_byte_timeout is not None and not 0 < self.first_byte_timeout <= 3600:
            raise ValueError("--first-byte-timeout must be above 0 and at most 3600 s")
        if self.bidirectional_kv and (self.connector != "nixl" or self.mode != "read"):
            raise ValueError("--bidirectional-kv is NIXL's: it needs --connector nixl --mode read")
        if not 0 < self.kv_blocks_ttl <= 86_400 or self.bidir_max_conversations < 1:
            raise ValueError(
                "--kv-blocks-ttl must be above 0 and at most 86400 s, "
                "--bidir-max-conversations at least 1"
            )
        if bad_retry := self.retry.invalid():
            raise ValueError(bad_retry)
        if self.hold_queue < 0 or self.hold_deadline < 0 or self.startup_grace < 0:
            raise ValueError(
                "--hold-queue, --hold-deadline and --startup-grace must not be negative"
            )
