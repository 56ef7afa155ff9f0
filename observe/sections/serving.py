"""The frame's `serving` section: the revision the deployment's processes are told to run and
its read/write modes, from the supervisor's spec, so the page header follows a switch or a
rollout without a reload (static/pdctl-live.js)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def serving(supervised: Any) -> dict[str, Any] | None:
    """{"revision": 6, "modes": ["write"]} for one supervised deployment; None when the
    supervisor keeps none of that name."""
    if supervised is None:
        return None
    modes = sorted({g.mode.value for g in supervised.spec.groups if g.mode is not None})
    return {"revision": supervised.revision, "modes": modes}


def serving_section(controller: Any) -> Callable[[str], dict[str, Any] | None]:
    """The section an Observer adds to every frame of `name` (Observer.sections)."""
    return lambda name: serving(controller.supervisor.deployments.get(name))
