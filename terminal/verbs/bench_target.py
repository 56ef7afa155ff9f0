"""The resolver `pdctl bench --deployment NAME` is given (bench/target.py): the deployment's
proxy URL from its status row, and its SLO from its spec, through the API."""

from __future__ import annotations

from bench.target import DeploymentTarget, TargetUnresolved
from domain.slo import SloTargets
from terminal import exits
from terminal.client import ApiClient, ApiError
from terminal.config import ConfigProblem, resolve
from terminal.verbs.read import path, status


def deployment_target(name: str, server: str | None) -> DeploymentTarget:
    try:
        api = ApiClient(resolve(server))
        spec = api.get(path(name))["spec"]
        units = status(api, name)
    except ApiError as exc:
        raise TargetUnresolved(exc.message, exc.code) from None
    except ConfigProblem as exc:
        raise TargetUnresolved(str(exc), exits.USAGE) from None
    proxy = next((u for u in units if u["role"] == "proxy"), None)
    if proxy is None or proxy["state"] != "RUNNING":
        state = "not started" if proxy is None else f"its proxy is {proxy['state']}"
        raise TargetUnresolved(f"{state}: nothing to load (pdctl start {name})", exits.FAILED)
    slo = spec.get("slo") or {}
    return DeploymentTarget(
        proxy["url"],
        SloTargets(
            slo.get("ttft_ms"), slo.get("itl_ms"), slo.get("tpot_ms"), slo.get("itl_stat", "p99")
        ),
    )
