"""A deployment's proxy's recent-requests log (GET /admin/requests), as the pages and the
live calibration read it: the lines, or why there are none."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from controller import ProxyAdminClient, ProxyAdminError
from web.deps import get_controller

LOG_LINES = 1000  # the proxy keeps its last 1,000 requests (connector/settings/proxy.py)


async def proxy_log(
    request: Request, name: str, limit: int = LOG_LINES
) -> tuple[list[dict[str, Any]], str | None]:
    controller = get_controller(request)
    if controller is None:
        return [], "this control plane runs without a controller"
    url = controller.supervisor.proxy_url(name)
    if url is None:
        return [], "the proxy is not running"
    client = ProxyAdminClient(url, lambda: controller.supervisor.admin_token(name), 2.0)
    try:
        return await client.recent_requests(limit), None
    except ProxyAdminError as exc:
        return [], f"the proxy's request log did not answer ({exc})"
    finally:
        await client.aclose()
