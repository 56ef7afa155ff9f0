"""An attached deployment: engines pdctl did not start, named by address (engine `external`).

Each group lists its instances' base URLs (`urls`, one per instance) or says where to find
them (`discover`: a Prometheus server's targets with the user's labels, or a vllm-router's
workers of the group's role), which the observer looks at again every `every_s` seconds
(observe/discovery/); the deployment may name the proxy its clients use (`external_proxy`:
its URL and kind). pdctl watches such a
deployment and never owns its processes: the lifecycle verbs refuse it
(controller/attach/refusal.py). `check_attached` holds the rules that relate fields;
`address_problems` the one that needs the operator's settings (which hosts may be named).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from controller.spec.field_error import FieldError
from domain.attached.addresses import base_url, host_allowed
from domain.errors import Problem

if TYPE_CHECKING:
    from controller.spec.deployment import DeploymentSpec

InstanceUrl = Annotated[
    str, StringConstraints(min_length=8, max_length=300), AfterValidator(base_url)
]


LabelKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_./-]{0,127}$")]
LabelValue = Annotated[str, StringConstraints(max_length=256)]


class Discovery(BaseModel):
    """Where a group's instances are found, instead of a list: one source of the two."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # A Prometheus server: its active targets whose labels are all `match`'s (each key as
    # given, in Prometheus spelling, or as a Kubernetes pod label: domain/attached/discovery.py).
    prometheus: InstanceUrl | None = None
    match: dict[LabelKey, LabelValue] = Field(default_factory=dict, max_length=16)
    router: InstanceUrl | None = None  # a vllm-router: its /workers of the group's role
    every_s: float = Field(5.0, ge=1.0, le=3600.0)  # how often the source is asked again


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
            if group.discover is not None:
                raise FieldError(
                    ("groups", i, "discover"),
                    "only an attached deployment (engine external) discovers its instances",
                )
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
        if group.discover is not None:
            _check_discovery(group.discover, i, bool(group.urls))
        elif not group.urls:
            raise FieldError(
                ("groups", i, "urls"),
                "an attached deployment names each instance's URL, or where to discover them "
                "(pdctl does not start them)",
            )
        elif len(group.urls) != group.count:
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


def _check_discovery(found: Discovery, i: int, listed: bool) -> None:
    at = ("groups", i, "discover")
    if listed:
        raise FieldError(
            ("groups", i, "urls"), "a group lists its urls or discovers them, not both"
        )
    if (found.prometheus is None) == (found.router is None):
        raise FieldError(at, "discover names one source: prometheus (with match) or router")
    if found.prometheus is not None and not found.match:
        raise FieldError(
            (*at, "match"),
            "a Prometheus discovery names the labels that pick this group's targets "
            '(e.g. {"llm-d.ai/role": "prefill"})',
        )
    if found.router is not None and found.match:
        raise FieldError(
            (*at, "match"), "a router's workers are picked by the group's role, not by labels"
        )


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
    for i, g in enumerate(spec.groups):
        for source in ("prometheus", "router"):
            if g.discover is not None and (url := getattr(g.discover, source)) is not None:
                named.append((("groups", i, "discover", source), url))
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
