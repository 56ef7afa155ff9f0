"""Pure: a deployment rendered for docker compose on one GPU node.

Services: the control plane (`pdctl serve`), the proxy, one vLLM container per instance (vLLM's
ROCm image with /dev/kfd and /dev/dri, or the CUDA image with all GPUs reserved; either way
the instance's HIP_/CUDA_VISIBLE_DEVICES picks its GPUs), Prometheus scraping the proxy, the
instances and the control plane, and Grafana provisioned with the dashboard in deploy/grafana.
Host networking throughout: MoRIIO's RDMA, the ZMQ registry and the rendered URLs
(127.0.0.1:port) all assume one network namespace. The instances' argv and env are exactly
controller/launch/render.py's, so the compose file and `pdctl serve` run the same commands.

No top-level `name` and no inline config content, so both Compose v2 and the older Python
docker-compose 1.29 accept the file.
"""

from __future__ import annotations

import json
import re
from typing import Any

from controller.launch.ports import AllocatedPorts
from controller.launch.render import LaunchSettings, gpu_env_name, render
from controller.manifests.secret_refs import reference
from controller.spec.deployment import DeploymentSpec, Engine
from domain.kv_connectors import KvConnectorBackend

ROCM_IMAGE = "vllm/vllm-openai-rocm:latest"
CUDA_IMAGE = "vllm/vllm-openai:latest"
PROMETHEUS_IMAGE = "prom/prometheus:v3.4.0"
GRAFANA_IMAGE = "grafana/grafana:11.6.0"
CONTROL_PLANE_PORT = 8000
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000
PROMETHEUS_CONFIG = "./deploy/prometheus.yml"


def render_compose(
    spec: DeploymentSpec,
    ports: AllocatedPorts,
    *,
    image: str | None = None,
    prometheus_config: str = PROMETHEUS_CONFIG,
) -> dict[str, Any]:
    """The compose document (a dict) for `spec` with its allocated `ports`."""
    settings = LaunchSettings(pdctl_command=("pdctl",))
    launches = render(spec, ports, settings)
    amd = gpu_env_name(spec) == "HIP_VISIBLE_DEVICES"
    image = image or (ROCM_IMAGE if amd else CUDA_IMAGE)
    services: dict[str, Any] = {"pdctl": _control_plane()}
    for launch in launches:
        if launch.is_proxy:
            services["proxy"] = {
                **_pdctl_image(),
                "command": [_literal(a) for a in launch.argv[1:]],
                "depends_on": ["pdctl"],
            }
            continue
        # Secrets from the host's environment (or .env), never values in the file.
        given, refs = reference(list(launch.argv), dict(launch.env), launch.group or "", "${{{}}}")
        argv = [a if i in refs else _literal(a) for i, a in enumerate(given.argv)]
        if spec.engine == Engine.SIM:
            service = {**_pdctl_image(), "command": argv[1:]}
        else:
            service = _vllm_service(argv, image, amd, spec.kv_backend)
        environment = {k: _literal(v) for k, v in given.env.items()}
        environment |= {variable: f"${{{variable}}}" for variable in given.secrets}
        if spec.engine == Engine.VLLM:
            environment["HF_TOKEN"] = "${HF_TOKEN:-}"
        services[launch.name] = {**service, "environment": environment, "depends_on": ["proxy"]}
    services["prometheus"] = {
        "image": PROMETHEUS_IMAGE,
        "network_mode": "host",
        "restart": "unless-stopped",
        "command": [
            "--config.file=/etc/prometheus/prometheus.yml",
            f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
        ],
        "volumes": [f"{prometheus_config}:/etc/prometheus/prometheus.yml:ro"],
    }
    services["grafana"] = {
        "image": GRAFANA_IMAGE,
        "network_mode": "host",
        "restart": "unless-stopped",
        "environment": {
            "GF_SERVER_HTTP_ADDR": "127.0.0.1",
            "GF_SERVER_HTTP_PORT": str(GRAFANA_PORT),
            "GF_AUTH_ANONYMOUS_ENABLED": "true",
            "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
        },
        "volumes": [
            "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro",
            "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro",
        ],
        "depends_on": ["prometheus"],
    }
    return {"services": services, "volumes": {"pdctl-data": {}}}


def _literal(text: str) -> str:
    """Compose interpolates `$NAME`; what comes from a spec is meant literally."""
    return text.replace("$", "$$")


def _pdctl_image() -> dict[str, Any]:
    return {
        "image": "pdctl:latest",
        "build": {"context": ".", "dockerfile": "deploy/Dockerfile"},
        "network_mode": "host",
        "restart": "unless-stopped",
    }


def _control_plane() -> dict[str, Any]:
    # No tokens set, so it binds loopback only (reach it through an SSH tunnel).
    return {
        **_pdctl_image(),
        "command": [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(CONTROL_PLANE_PORT),
            "--db",
            "/data/pdctl.db",
        ],
        "volumes": ["pdctl-data:/data"],
    }


def _vllm_service(
    argv: list[str], image: str, amd: bool, kv: KvConnectorBackend | None
) -> dict[str, Any]:
    service: dict[str, Any] = {
        "image": image,
        "network_mode": "host",
        "restart": "unless-stopped",
        "entrypoint": argv[:2],
        "command": argv[2:],
        "ipc": "host",
        "shm_size": "16g",
        "volumes": ["${HF_HOME:-~/.cache/huggingface}:/root/.cache/huggingface"],
        "stop_grace_period": "30s",
    }
    if amd:
        devices = ["/dev/kfd", "/dev/dri"]
        devices += kv.rocm_devices if kv is not None else ()  # MoRIIO's NIC
        service |= {
            "devices": devices,
            "group_add": ["video"],
            "cap_add": ["SYS_PTRACE", "IPC_LOCK"],
            "security_opt": ["seccomp=unconfined"],
            "ulimits": {"memlock": -1},
        }
    else:
        # All GPUs in the container; CUDA_VISIBLE_DEVICES (from the spec) picks them, so the
        # ids mean the same thing here as on the host.
        service["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
                }
            }
        }
    return service


def render_prometheus(spec: DeploymentSpec, ports: AllocatedPorts) -> dict[str, Any]:
    """prometheus.yml: the proxy, every instance (labelled with role and group), pdctl."""
    launches = render(spec, ports)
    instances = [
        {
            "targets": [f"127.0.0.1:{launch.http_port}"],
            "labels": {
                "deployment": spec.name,
                "instance_name": launch.name,
                "role": launch.role or "",
                "group": launch.group or "",
            },
        }
        for launch in launches
        if not launch.is_proxy
    ]
    return {
        "global": {"scrape_interval": "5s", "evaluation_interval": "15s"},
        "scrape_configs": [
            {
                "job_name": "pdctl-proxy",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{ports.proxy}"], "labels": {"deployment": spec.name}}
                ],
            },
            {"job_name": "vllm", "static_configs": instances},
            {
                "job_name": "pdctl",
                "static_configs": [{"targets": [f"127.0.0.1:{CONTROL_PLANE_PORT}"]}],
            },
        ],
    }


# A small YAML writer: block style, every string double-quoted (a JSON string is a valid YAML
# double-quoted scalar), so nothing is mis-read as a number, a boolean or a comment.

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def to_yaml(value: Any, header: str = "") -> str:
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += _emit(value, 0)
    return "\n".join(lines) + "\n"


def compose_yaml(document: dict[str, Any]) -> str:
    return to_yaml(
        document,
        "Rendered by `pdctl deploy compose` (controller/manifests/compose.py); edit the "
        "spec, not this file.\nRun from the repo root: docker compose up -d",
    )


def prometheus_yaml(spec: DeploymentSpec, ports: AllocatedPorts) -> str:
    return to_yaml(
        render_prometheus(spec, ports),
        f"Prometheus for deployment {spec.name}, rendered by `pdctl deploy compose`.",
    )


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(str(value))


def _key(key: str) -> str:
    return key if _PLAIN_KEY.match(key) else json.dumps(key)


def _emit(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out = []
        for k, v in value.items():
            if isinstance(v, dict | list) and v:
                out.append(f"{pad}{_key(str(k))}:")
                out += _emit(v, indent + 2)
            else:
                out.append(f"{pad}{_key(str(k))}: {_inline(v)}")
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if isinstance(item, dict | list) and item:
                nested = _emit(item, indent + 2)
                out.append(f"{pad}- {nested[0].lstrip()}")
                out += nested[1:]
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [pad + _scalar(value)]


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)
