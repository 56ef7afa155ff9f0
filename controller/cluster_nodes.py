"""The cluster's nodes as the backend lists them, bounded in time: a Ray cluster that does not
answer is a 503 naming why in one line, never a hang or a page of traceback."""

from __future__ import annotations

import asyncio
import logging

from controller.launch.placement import Node
from controller.supervise.supervisor import Supervisor
from domain.errors import Unavailable

log = logging.getLogger("pdctl.controller")

NODES_TIMEOUT_S = 10.0  # a cluster that takes longer to list its nodes is not answering


class ClusterUnreachable(Unavailable):
    """The backend could not list its nodes just now (the Ray cluster does not answer)."""

    title = "Cluster unreachable"


async def list_nodes(supervisor: Supervisor) -> list[Node]:
    try:
        return await asyncio.wait_for(supervisor.nodes(), NODES_TIMEOUT_S)
    except TimeoutError:
        raise ClusterUnreachable(
            f"the cluster did not list its nodes within {NODES_TIMEOUT_S:g} s; try again"
        ) from None
    except Exception as exc:  # Ray raises many kinds here; each means it did not answer
        log.warning("listing the cluster's nodes failed: %s", exc)
        raise ClusterUnreachable(f"the cluster does not answer: {one_line(exc)}") from None


def one_line(exc: BaseException) -> str:
    """Why, in one line: never a traceback (Ray's errors carry pages of one)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]
