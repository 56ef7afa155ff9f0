"""What runs for one process of a deployment (`Launch`), and how this host launches them
(`LaunchSettings`): plain data, built by controller/launch/render.py."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from controller.launch.placement import PROXY  # the launch name of the deployment's proxy
from controller.spec.deployment import InstancePorts
from controller.spec.redact import redact_argv, redact_command, redact_env

VLLM_SERVE = ("vllm", "serve")


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    """How things are launched on this host: operator settings, not part of a deployment."""

    # How vLLM is started. Ending in "serve": the model is positional (`vllm serve MODEL`);
    # otherwise (`python -m vllm.entrypoints.openai.api_server`) it is given by --model.
    vllm_command: tuple[str, ...] = VLLM_SERVE
    pdctl_command: tuple[str, ...] = ("pdctl",)  # runs `pdctl sim` and `pdctl proxy`
    host: str = "127.0.0.1"  # where processes are reached (URLs, proxy_ip) unless placed
    # --host for every server not placed on a node; None: engines bind `host`, the proxy its
    # own default. A placed process (controller/launch/placement.py) binds its node's address.
    bind_host: str | None = None
    sim_registration_interval: float | None = None  # stand-in MoRIIO heartbeat (tests)
    proxy_extra_args: tuple[str, ...] = ()  # e.g. hidden test knobs of `pdctl proxy`
    # Senders a MoRIIO proxy's registry takes beyond loopback. On a cluster: "any", since
    # instances register from their nodes' addresses, which change when a lost node's
    # instance moves while the proxy runs on; the expected registrations (exact URL, ports
    # and mode of each launched instance) stay the gate.
    registry_allow: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Launch:
    """One process of a deployment: an engine instance or the proxy."""

    name: str  # instance name (group-index) or "proxy"
    argv: list[str]  # what runs
    env: dict[str, str]  # added to the environment of what runs
    command: str  # the line an operator would type (`vllm serve ...` for instances)
    url: str
    http_port: int
    role: str | None = None  # prefill | decode | colocated; None for the proxy
    group: str | None = None
    mode: str | None = None  # MoRIIO read | write
    gpus: list[int] = field(default_factory=list)
    ports: InstancePorts | None = None
    registers: bool = False  # MoRIIO: ready only once the proxy lists its registration
    address: str | None = None  # its node's address when placed on a cluster
    # Added to the environment when the process starts, but not what identifies it: a change
    # here restarts nothing (the proxy's expected registrations change with every switch,
    # and a running proxy is told them through its admin API).
    handover: dict[str, str] = field(default_factory=dict)

    @property
    def is_proxy(self) -> bool:
        return self.name == PROXY

    def preview(self) -> dict[str, Any]:
        """What people are shown: secret env values and flags masked (controller/spec/redact.py);
        `argv` and `env` themselves are what runs."""
        shown_env = redact_env(self.env)
        command = redact_command(self.command)
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown_env.items())
        return {
            "argv": redact_argv(self.argv),
            "env": shown_env,
            "command": command,
            "command_line": f"{env} {command}" if env else command,
        }
