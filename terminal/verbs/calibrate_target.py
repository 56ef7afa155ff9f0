"""The caller `pdctl calibrate --deployment NAME` is given (simulator/plan/calibration/cli.py,
by pdctl.py: the simulator sits below the terminal): POST /api/deployments/NAME/calibration
through the control plane's API; the answer, or its refusal as one line and an exit code."""

from __future__ import annotations

from typing import Any

from terminal import exits
from terminal.client import ApiClient, ApiError
from terminal.config import ConfigProblem, resolve
from terminal.verbs.read import path

FIT_TIMEOUT_S = 120.0  # the fit replays up to 1,000 logged requests twice on the planner


def calibrate_deployment(
    name: str, server: str | None, body: dict[str, Any]
) -> tuple[dict[str, Any] | None, str, int]:
    """(the API's answer, "", 0), or (None, why, exit code)."""
    try:
        api = ApiClient(resolve(server))
        api.timeout_s = max(api.timeout_s, FIT_TIMEOUT_S)
        return api.post(path(name, "/calibration"), body), "", 0
    except ApiError as exc:
        return None, exc.message, exc.code
    except ConfigProblem as exc:
        return None, str(exc), exits.USAGE
