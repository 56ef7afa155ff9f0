"""An attached deployment: engines pdctl did not start, named by address (engine `external`).

Each group lists its instances' base URLs (`urls`, one per instance); the deployment may name
the proxy its clients use (`external_proxy`: its URL and kind). pdctl watches such a
deployment and never owns its processes: the lifecycle verbs refuse it
(controller/attach/refusal.py). `check_attached` holds the rules that relate fields;
`address_problems` the one that needs the operator's settings (which hosts may be named).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from controller.spec.field_error import FieldError
from domain.errors import Problem

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec

SCHEMES = ("http", "https")
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def _base_url(url: str) -> str:
    """A scheme, a host and maybe a port: the address an engine's /metrics and /v1 hang off."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"scheme {parts.scheme or '(none)'!r}: an address is http or https")
    if not parts.hostname:
        raise ValueError("an address names a host")
    if parts.username or parts.password:
        raise ValueError("an address carries no user or password")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("an address is scheme://host:port, with no path, query or fragment")
    try:
        parts.port  # noqa: B018  # raises on a port out of range
    except ValueError as err:
        raise ValueError(f"bad port: {err}") from None
    return url.rstrip("/")


InstanceUrl = Annotated[
    str, StringConstraints(min_length=8, max_length=300), AfterValidator(_base_url)
]


class ProxyKind(enum.StrEnum):
    PDCTL = "pdctl"  # pdctl's own proxy: its /metrics give the client's figures
    VLLM_ROUTER = "vllm-router"
    OTHER = "other"


class ExternalProxy(BaseModel):
    """The proxy the deployment's clients send to: the canary goes through it."""

    model_config = ConfigDict(extra="forbid")

    url: InstanceUrl
    kind: ProxyKind = ProxyKind.OTHER


def is_attached(spec: DeploymentSpec) -> bool:
    return spec.engine.value == "external"


def check_attached(spec: DeploymentSpec) -> None:
    """An attached spec names every instance by address and nothing pdctl would launch; any
    other spec names no addresses."""
    if not is_attached(spec):
        for i, group in enumerate(spec.groups):
            if group.urls:
                raise FieldError(
                    ("groups", i, "urls"),
                    "only an attached deployment (engine external) names its instances' URLs",
                )
        if spec.external_proxy is not None:
            raise FieldError(
                ("external_proxy",),
                "only an attached deployment (engine external) names an external proxy",
            )
        return
    seen: dict[str, str] = {}
    for i, group in enumerate(spec.groups):
        if not group.urls:
            raise FieldError(
                ("groups", i, "urls"),
                "an attached deployment names each instance's URL (pdctl does not start them)",
            )
        if len(group.urls) != group.count:
            raise FieldError(
                ("groups", i, "count"),
                f"{len(group.urls)} URL(s) name {len(group.urls)} instance(s), not {group.count}",
            )
        for j, url in enumerate(group.urls):
            if url in seen:
                raise FieldError(("groups", i, "urls", j), f"{url} is also {seen[url]}")
            seen[url] = f"{group.name}-{j}"
        for field in ("ports", "gpus", "placement"):
            if getattr(group, field):
                raise FieldError(
                    ("groups", i, field),
                    f"an attached deployment's instances run elsewhere: {field} is not pdctl's",
                )
    proxy = spec.external_proxy
    if proxy is not None and proxy.url in seen:
        raise FieldError(("external_proxy", "url"), f"{proxy.url} is also {seen[proxy.url]}")


def address_problems(spec: DeploymentSpec, allowed_hosts: Iterable[str]) -> list[Problem]:
    """Each address of `spec` on a host the operator has not allowed (loopback always is;
    PDCTL_ATTACH_HOSTS names more: host names, IPs or networks such as 10.0.0.0/8)."""
    allowed = list(allowed_hosts)
    problems = []
    named: list[tuple[tuple[str | int, ...], str]] = [
        (("groups", i, "urls", j), u)
        for i, g in enumerate(spec.groups)
        for j, u in enumerate(g.urls)
    ]
    if spec.external_proxy is not None:
        named.append((("external_proxy", "url"), spec.external_proxy.url))
    for loc, url in named:
        host = urlsplit(url).hostname or ""
        if not host_allowed(host, allowed):
            problems.append(
                Problem(
                    loc,
                    f"host {host!r} is not loopback nor among the hosts this control plane may "
                    "watch; its operator can allow it with PDCTL_ATTACH_HOSTS",
                    "host_not_allowed",
                )
            )
    return problems


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    host = host.lower().strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if host in LOOPBACK_NAMES or (ip is not None and ip.is_loopback):
        return True
    for entry in allowed:
        entry = entry.lower().strip()
        if entry == host:
            return True
        if ip is not None and "/" in entry:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False
