"""What pdctl steers on an attached deployment (engines it did not start) without owning the
processes:

- a role move, through the engines' own runtime role switching (POST /v1/pd_role, newer
  vLLM and the stand-in; vLLM 0.32 has none, so its engines answer 404 and the move is
  refused, with the `vllm serve` flags a restart in the new role would run);
- pause, drain and release at the proxy, when the proxy is pdctl's (its admin API).

With a pdctl proxy in front (`external_proxy.kind: pdctl`), a move drains the instance there
first and routes it in its new role after, as for an owned deployment; the control plane
calls that proxy's admin API with PDCTL_ATTACH_ADMIN_TOKEN. Behind any other proxy pdctl can
neither drain the instance there nor tell the proxy its new role: requests the proxy sends it
meanwhile are refused by the engine's fence (409), and the proxy keeps routing it in its old
role afterwards. So such a move is refused unless forced, and a forced one says so in its
answer: losing requests is the operator's call, made knowing it.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from controller.clients.proxy_admin import InstanceEntry, ProxyAdminClient, ProxyAdminError
from controller.spec.deployment import DeploymentSpec
from controller.switch.role_move import Move, MoveAt
from domain.errors import Conflict, UpstreamError

PROBE_TIMEOUT_S = 5.0
PROBE_MAX_BYTES = 64 * 1024  # a role answer is a few hundred bytes
TOKEN_SETTING = "PDCTL_ATTACH_ADMIN_TOKEN"


class SteerRefused(Conflict):
    """A move or a proxy call pdctl cannot make on this attached deployment."""

    title = "Not steerable here"


def instance_urls(spec: DeploymentSpec) -> dict[str, str]:
    """Each attached instance's base URL, by name; SteerRefused when a group discovers its
    instances (`discover`): which instance a name means changes with what is found, so pdctl
    steers only instances the spec names by URL."""
    found = [g.name for g in spec.groups if g.discover is not None]
    if found:
        raise SteerRefused(
            f"deployment {spec.name!r} discovers the instances of group(s) {', '.join(found)}: "
            "pdctl moves and drains only instances its spec names by URL (list them as "
            "urls to steer them)"
        )
    return {f"{g.name}-{i}": url for g in spec.groups for i, url in enumerate(g.urls)}


def pdctl_proxy(spec: DeploymentSpec, token: str | None, verb: str) -> ProxyAdminClient:
    """The admin client of the deployment's proxy when it is pdctl's; else SteerRefused
    saying why `verb` cannot be done here and where it can."""
    proxy, name = spec.external_proxy, spec.name
    if proxy is None:
        raise SteerRefused(
            f"deployment {name!r} is attached and names no proxy: pdctl can {verb} only at a "
            "pdctl proxy (external_proxy with kind pdctl); do it at the proxy its clients use"
        )
    if proxy.kind.value != "pdctl":
        raise SteerRefused(
            f"deployment {name!r} is attached behind a {proxy.kind.value} proxy ({proxy.url}): "
            f"pause, drain and release are pdctl proxy admin calls, which that proxy does not "
            f"have; {verb} there with its own controls"
        )
    if not token:
        raise SteerRefused(
            f"deployment {name!r}'s proxy ({proxy.url}) is pdctl's, but this control plane "
            f"has no admin token for it: set {TOKEN_SETTING} to the token it was started with "
            "(its PDCTL_ADMIN_TOKEN, or the file `pdctl proxy` named at its start)"
        )
    return ProxyAdminClient(proxy.url, lambda: token)


def unsteered(spec: DeploymentSpec, move: Move, url: str) -> str:
    """What a move behind a proxy pdctl cannot steer leaves undone."""
    proxy = spec.external_proxy
    at = f"the {proxy.kind.value} proxy at {proxy.url}" if proxy else "the clients' proxy"
    return (
        f"{at} was not drained nor told the move: requests it sent {move.instance} ({url}) "
        f"while it switched were refused (409), and it routes {move.instance} as a "
        f"{move.source} instance until it is told it serves {move.target}"
    )


def move_where(
    spec: DeploymentSpec, move: Move, force: bool, token: str | None
) -> tuple[MoveAt, str | None]:
    """Where the move is made, and the warning its answer carries (None: none); SteerRefused
    when the proxy is not pdctl's and the move is not forced."""
    url = instance_urls(spec)[move.instance]
    proxy = spec.external_proxy
    if proxy is not None and proxy.kind.value == "pdctl":
        return MoveAt(spec.name, url, pdctl_proxy(spec, token, "drain it")), None
    warning = unsteered(spec, move, url)
    if not force:
        raise SteerRefused(
            f"deployment {spec.name!r} is attached and pdctl cannot steer its proxy: if it "
            f"moved {move.instance}, {warning}. Re-route it at that proxy yourself and move "
            "it with force (pdctl move --force, or force: true)"
        )
    return MoveAt(spec.name, url, None), warning


async def probe_pd_role(spec: DeploymentSpec, move: Move, url: str, flags: list[str]) -> None:
    """The instance carries runtime role switching (GET /v1/pd_role answers its role);
    SteerRefused when it has none, naming `flags`, the `vllm serve` flags of a restart in
    its new role (controller/attached.py renders them); UpstreamError when it cannot be read."""
    timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url + "/v1/pd_role", allow_redirects=False) as r,
        ):
            body = await r.content.read(PROBE_MAX_BYTES)
            status = r.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise UpstreamError(
            f"{move.instance} ({url}): GET /v1/pd_role: {type(exc).__name__}: {exc}"
        ) from None
    if status in (404, 405):
        line = " ".join(["vllm", "serve", spec.model, *flags])
        raise SteerRefused(
            f"the engines of attached deployment {spec.name!r} do not support role moves: "
            f"{move.instance} ({url}) answers {status} to GET /v1/pd_role (runtime role "
            f"switching is not in its vLLM). To make it a {move.target} instance, restart it "
            f"where it runs with: {line}; then attach it again with its URL as --"
            f"{move.target} (an engine already run with kv_role kv_both needs no restart: its "
            "proxy can route it either way)"
        )
    if status != 200 or b'"epoch"' not in body:
        raise UpstreamError(
            f"{move.instance} ({url}): GET /v1/pd_role answered {status}: "
            f"{body[:120].decode(errors='replace')}"
        )


class NoProxy:
    """The rollout's proxy calls when pdctl cannot call the deployment's proxy: it reads
    nothing there and refuses every change (the role move's own steps do not call it)."""

    async def instances(self) -> list[InstanceEntry]:
        return []

    async def rejected(self) -> int:
        return 0

    async def expect(self, registrations: list[dict[str, Any]] | None) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def pause(self, group: str) -> None:
        raise ProxyAdminError(f"pause {group}: no pdctl proxy to call")

    async def resume(self, group: str) -> None:
        raise ProxyAdminError(f"resume {group}: no pdctl proxy to call")

    async def drain(self, url: str) -> bool:
        return False

    async def undrain(self, url: str) -> bool:
        return False

    async def set_whole(self, url: str, whole: bool) -> bool:
        return False

    async def add(self, url: str, role: str) -> None:
        raise ProxyAdminError(f"route {url}: no pdctl proxy to call")

    async def remove(self, url: str) -> bool:
        return False
