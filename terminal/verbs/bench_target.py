"""The resolver `pdctl bench --deployment NAME` is given (bench/target.py): the deployment's
proxy URL from its status row, and its SLO from its spec, through the API; and the keeper that
posts the finished run back, so the deployment page's Bench panel lists it (with the revision
the run started on)."""

from __future__ import annotations

from typing import Any

from bench.report import REQUEST_DETAIL_KEYS
from bench.target import DeploymentTarget, Keeper, TargetUnresolved
from domain.measures.slo import SloTargets
from terminal import exits
from terminal.client import ApiClient, ApiError
from terminal.config import ConfigProblem, resolve
from terminal.verbs.read import path, status


def deployment_target(name: str, server: str | None) -> DeploymentTarget:
    try:
        api = ApiClient(resolve(server))
        current = api.get(path(name))
        spec = current["spec"]
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
        keeper(api, name, current["revision"]),
    )


def keeper(api: ApiClient, name: str, revision: int) -> Keeper:
    def keep(settings: dict[str, Any], result: dict[str, Any]) -> str:
        body = {"revision": revision, "config": settings, "result": summaries_only(result)}
        try:
            run = api.post(path(name, "/bench/runs"), body)
        except ApiError as exc:
            raise TargetUnresolved(exc.message, exc.code) from None
        return (
            f"kept as bench run {run['id']} of {name} (revision {revision}): its page's Bench panel"
        )

    return keep


def summaries_only(result: dict[str, Any]) -> dict[str, Any]:
    """The document without per-request records (--save-requests): the page draws the
    summaries, and a long run's records would pass the control plane's body limit."""
    runs = result.get("runs")
    if isinstance(runs, list):
        return {**result, "runs": [_without_requests(r) for r in runs]}
    return _without_requests(result)


def _without_requests(run: Any) -> Any:
    if not isinstance(run, dict):
        return run
    return {k: v for k, v in run.items() if k not in REQUEST_DETAIL_KEYS}
