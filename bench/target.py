"""`pdctl bench --deployment NAME`: where the load goes and the SLO it is judged by, from a
deployment stored in a control plane. bench sits below the control plane's client, so the
one who can ask it (the terminal's operator verbs) hands in the resolver (`use_resolver`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from domain.measures.slo import SloTargets

# (the run's settings, its result document) -> one line saying where it was kept; raises
# TargetUnresolved when the control plane would not keep it
Keeper = Callable[[dict[str, Any], dict[str, Any]], str]


@dataclass(frozen=True)
class DeploymentTarget:
    """The deployment's proxy and its SLO (the defaults of --slo-*), and how to hand the
    finished run back to the control plane, which keeps it with the deployment's runs."""

    base_url: str
    slo: SloTargets
    keep: Keeper | None = None


class TargetUnresolved(RuntimeError):
    """One line saying why the deployment cannot be loaded, and the exit code it maps to."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message, self.code = message, code


Resolver = Callable[[str, str | None], DeploymentTarget]  # (deployment, --server) -> target
_resolver: list[Resolver] = []


def use_resolver(resolver: Resolver) -> None:
    _resolver[:] = [resolver]


def resolve(name: str, server: str | None) -> DeploymentTarget:
    if not _resolver:
        raise TargetUnresolved("--deployment needs pdctl's operator verbs (terminal/)", 2)
    return _resolver[0](name, server)


def with_defaults(given: SloTargets, stored: SloTargets, stat_given: bool) -> SloTargets:
    """The flags' targets, each one not given taken from the deployment's SLO."""
    return SloTargets(
        given.ttft_ms if given.ttft_ms is not None else stored.ttft_ms,
        given.itl_ms if given.itl_ms is not None else stored.itl_ms,
        given.tpot_ms if given.tpot_ms is not None else stored.tpot_ms,
        given.itl_stat if stat_given else stored.itl_stat,
    )
