"""The control plane's settings: pydantic-settings with the PDCTL_ prefix, one cached instance.

Token lists and the port range also read plain strings from the environment:
`PDCTL_OPERATOR_TOKENS="alice:s3cret,ci:t0ken"`, `PDCTL_PORT_RANGE=20000-29999`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from controller import DEFAULT_RANGE

TokenList = Annotated[list[str], NoDecode]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDCTL_", extra="ignore", allow_inf_nan=False)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    db: Path = Path("pdctl.db")
    viewer_tokens: TokenList = Field(default_factory=list)
    operator_tokens: TokenList = Field(default_factory=list)
    allow_code_env: bool = False
    # Directories an engine's paths (HF_HOME, --download-dir, --chat-template FILE, a
    # connector's shared_storage_path ...) may be under; none given: the model cache
    # (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub) and runtime_dir/engine-files.
    # PDCTL_ENGINE_PATH_ROOTS=/a,/b
    engine_path_roots: TokenList = Field(default_factory=list)
    port_range: Annotated[tuple[int, int], NoDecode] = DEFAULT_RANGE
    runtime_dir: Path = Path("runs")
    vllm_launcher: str = "vllm serve"
    max_body_bytes: int = Field(1 << 20, ge=1024)
    migrate_on_start: bool = True
    # Run the controller (supervisor of instances) in this process.
    controller: bool = True
    # Place deployments on this Ray cluster (its GCS HOST:PORT) instead of local processes;
    # ray_node_ip: the address of this machine's own Ray node when several share a machine.
    ray_address: str | None = Field(None, pattern=r"^[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}$")
    ray_namespace: str = Field("pdctl", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    ray_node_ip: str | None = None
    # A rollout's wait for restarted processes to be ready fails after this many seconds
    # (default: the supervisor's start timeout, 600 s: a big model loads for minutes).
    rollout_ready_s: float | None = Field(None, gt=0, le=86400)
    # Stand-in MoRIIO instances' registration heartbeat (vLLM's is 3 s); tests shorten it.
    sim_registration_interval: float | None = Field(None, gt=0)
    # Store the demo deployment (services/demo/deployments.py) when there is none; `make run` sets
    # PDCTL_DEMO=1.
    demo: bool = False
    # With demo: also store (into an empty store) and start the pair that shows the trade,
    # and offer load to it while it runs (services/demo/trade.py); `make run` sets
    # PDCTL_DEMO_TRADE=1. Off by default, so no test starts it unless it asks.
    demo_trade: bool = False
    # observe/: scrape every instance and proxy this often; keep a point per history_step_s.
    scrape_interval: float = Field(1.0, gt=0, le=60)
    scrape_timeout: float = Field(0.8, gt=0, le=60)
    history_step_s: float = Field(5.0, gt=0, le=3600)
    history_retention_hours: float = Field(24.0, gt=0)
    # Live websockets (/ws/deployments/{name}): at most this many at once; queue per socket.
    max_websockets: int = Field(100, ge=1)
    live_queue_size: int = Field(16, ge=1)
    # Failed sign-ins (and unknown tokens) per client address per minute; more are 429.
    login_attempts_per_minute: int = Field(10, ge=1)
    # Origins whose unsafe requests pass the cross-origin check although their host differs
    # from Host (a reverse proxy that rewrites it): "https://pdctl.example.com".
    trusted_origins: TokenList = Field(default_factory=list)
    # Addresses of reverse proxies whose X-Forwarded-For/-Proto are believed (uvicorn's
    # forwarded_allow_ips, "*" for any); none by default: the socket's peer is the client.
    forwarded_allow_ips: TokenList = Field(default_factory=list)
    # Host names (any port) answered when no tokens are set; a DNS-rebinding page's requests
    # carry its own name. Default: the loopback names (web/security/hosts.py).
    allowed_hosts: TokenList = Field(default_factory=list)
    # Hosts beyond loopback an attached deployment may name (controller/spec/attach.py):
    # names, IPs or networks ("10.0.0.0/8"). Probes go only where the operator says.
    attach_hosts: TokenList = Field(default_factory=list)
    # The admin token of attached deployments' pdctl proxies (PDCTL_ATTACH_ADMIN_TOKEN): their
    # drain, pause and release, and a role move's drain (controller/switch/attached_steer.py).
    attach_admin_token: SecretStr | None = None
    # A plan's sweep or search starts no run after this many seconds (services/plan_runner.py).
    plan_deadline_s: float = Field(15.0, gt=0, le=3600)
    # Seconds a client may take to send a request's head, and then its body
    # (web/security/deadlines.py).
    header_timeout_s: float = Field(10.0, gt=0, le=3600)
    body_timeout_s: float = Field(30.0, gt=0, le=3600)

    @field_validator(
        "viewer_tokens",
        "operator_tokens",
        "engine_path_roots",
        "trusted_origins",
        "forwarded_allow_ips",
        "allowed_hosts",
        "attach_hosts",
        mode="before",
    )
    @classmethod
    def _split_tokens(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [t.strip() for t in text.split(",") if t.strip()]
        return value

    @field_validator("port_range", mode="before")
    @classmethod
    def _parse_range(cls, value: object) -> object:
        if isinstance(value, str):
            low, sep, high = value.partition("-")
            if not sep:
                raise ValueError("port range is LOW-HIGH, e.g. 20000-29999")
            return int(low), int(high)
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        low, high = self.port_range
        if not 1 <= low <= high <= 65535:
            raise ValueError(f"port range {low}-{high} must satisfy 1 <= low <= high <= 65535")
        for root in self.engine_path_roots:
            if not root.startswith("/"):
                raise ValueError(f"engine_path_roots: {root!r} is not an absolute path")
        for token in (*self.viewer_tokens, *self.operator_tokens):
            if not token.rpartition(":")[2]:
                raise ValueError("a token is SECRET or NAME:SECRET with a non-empty secret")
        return self

    @property
    def auth_enabled(self) -> bool:
        return bool(self.viewer_tokens or self.operator_tokens)

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.db}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
