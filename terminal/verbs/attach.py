"""`pdctl attach NAME --prefill URL... --decode URL... [--proxy URL] [--proxy-kind K]` (or
`--from-router URL`: the instances a vllm-router routes to, from its /workers, once; or
`--discover-prometheus URL [--match k=v]...` / `--discover-router URL`: where the control plane
finds them again and again, so instances that come and go are followed): store
an attached deployment (engine `external`): engines someone else started, which pdctl watches
(live frames, "is PD happening", the canary, health events) and never starts, stops or
restarts. A refused address is the API's 422, told by the flag that gave it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Annotated, Any

import typer

from terminal.client import ApiError
from terminal.session import JsonOption, ReasonOption, ServerOption, Usage, client, show_json
from terminal.verbs.read import Name

PROXY_KINDS = ("pdctl", "vllm-router", "other")
DISCOVER_FLAGS = {
    "prometheus": "--discover-prometheus",
    "router": "--discover-router",
    "match": "--match",
    "every_s": "--discover-every",
}
ROUTER_TIMEOUT_S = 5.0
ROUTER_MAX_BYTES = 1 << 20  # a worker list of thousands is far below this
Urls = Annotated[
    list[str] | None,
    typer.Option(help="An instance's base URL, e.g. http://127.0.0.1:8100 (repeat for more)."),
]


def attach(
    name: Name,
    prefill: Urls = None,
    decode: Urls = None,
    from_router: Annotated[
        str | None,
        typer.Option(help="A vllm-router: attach the instances its /workers lists, behind it."),
    ] = None,
    model: Annotated[str, typer.Option(help="The model the engines serve.")] = "tiny",
    connector: Annotated[str, typer.Option(help="Their KV connector.")] = "NixlConnector",
    mode: Annotated[
        str | None, typer.Option(help="read or write, for a connector with modes (MoRIIO).")
    ] = None,
    proxy: Annotated[
        str | None, typer.Option(help="The proxy clients send to; the canary goes there.")
    ] = None,
    proxy_kind: Annotated[str, typer.Option(help="pdctl, vllm-router or other.")] = "other",
    discover_prometheus: Annotated[
        str | None,
        typer.Option(help="A Prometheus server: follow its targets whose labels match."),
    ] = None,
    match: Annotated[
        list[str] | None,
        typer.Option(help="label=value a Prometheus target must carry (repeat for more)."),
    ] = None,
    role_label: Annotated[
        str, typer.Option(help="The label whose value is the instance's role (prefill, decode).")
    ] = "llm-d.ai/role",
    discover_router: Annotated[
        str | None,
        typer.Option(help="A vllm-router: follow the workers its /workers lists, behind it."),
    ] = None,
    discover_every: Annotated[
        float, typer.Option(help="Seconds between two looks at the discovery source.")
    ] = 5.0,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Watch a PD deployment pdctl did not start, by its instances' addresses."""
    if proxy_kind not in PROXY_KINDS:
        raise Usage(f"--proxy-kind {proxy_kind!r}: one of {', '.join(PROXY_KINDS)}")
    if match and discover_prometheus is None:
        raise Usage("--match goes with --discover-prometheus URL")
    if discover_prometheus is not None or discover_router is not None:
        if discover_prometheus is not None and discover_router is not None:
            raise Usage("--discover-prometheus and --discover-router: name one source")
        if prefill or decode or from_router:
            raise Usage(
                "--discover-prometheus/--discover-router find the instances: "
                "drop --prefill, --decode and --from-router"
            )
        discover = discovery_groups(
            discover_prometheus, discover_router, labels_given(match or []), role_label,
            discover_every,
        )  # fmt: skip
        if discover_router is not None:
            proxy, proxy_kind = proxy or discover_router.rstrip("/"), "vllm-router"
        if proxy is None and proxy_kind != "other":
            raise Usage("--proxy-kind goes with --proxy URL")
        spec = attached_spec(name, [], [], model, connector, mode, proxy, proxy_kind, discover)
        made = _create(spec, reason, server)
        if as_json:
            show_json(made)
            return
        where = discover_router or discover_prometheus
        via = f" behind {proxy_kind} {proxy}" if proxy else ""
        typer.echo(f"{name}: attached by discovery from {where}{via} (revision {made['revision']})")
        return
    if from_router is not None:
        if prefill or decode:
            raise Usage("--from-router lists the instances: drop --prefill and --decode")
        prefill, decode = router_workers(read_workers(from_router))
        proxy, proxy_kind = proxy or from_router.rstrip("/"), "vllm-router"
    if not prefill or not decode:
        raise Usage("name at least one --prefill URL and one --decode URL (or --from-router)")
    if proxy is None and proxy_kind != "other":
        raise Usage("--proxy-kind goes with --proxy URL")
    spec = attached_spec(name, prefill, decode, model, connector, mode, proxy, proxy_kind)
    made = _create(spec, reason, server)
    if as_json:
        show_json(made)
        return
    groups = made["spec"]["groups"]
    count = sum(len(g["urls"]) for g in groups)
    via = f" behind {proxy_kind} {proxy}" if proxy else ""
    typer.echo(f"{name}: attached {count} instance(s){via} (revision {made['revision']})")


def _create(spec: dict[str, Any], reason: str | None, server: str | None) -> Any:
    try:
        return client(server).post("/api/deployments", spec, reason=reason)
    except ApiError as exc:
        raise _by_flag(exc) from None


def discovery_groups(
    prometheus: str | None,
    router: str | None,
    labels: dict[str, str],
    role_label: str,
    every_s: float,
) -> dict[str, dict[str, Any]]:
    """Each role's `discover`: the router's workers of that role, or the Prometheus targets
    with the user's labels and the role in `role_label` (llm-d's `llm-d.ai/role`)."""
    out: dict[str, dict[str, Any]] = {}
    for role in ("prefill", "decode"):
        if router is not None:
            out[role] = {"router": router, "every_s": every_s}
        else:
            picked = {**labels, role_label: role} if role_label else labels
            out[role] = {"prometheus": prometheus, "match": picked, "every_s": every_s}
    return out


def labels_given(pairs: list[str]) -> dict[str, str]:
    """`--match k=v` flags as labels; a flag without `=` is refused by name."""
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise Usage(f"--match {pair!r}: a label=value pair, e.g. namespace=llm-d")
        out[key.strip()] = value.strip()
    return out


def read_workers(router: str) -> Any:
    """The router's /workers document (bounded in time and size)."""
    url = router.rstrip("/") + "/workers"
    if not url.startswith(("http://", "https://")):
        raise Usage(f"--from-router {router!r}: an http or https URL")
    try:
        with urllib.request.urlopen(url, timeout=ROUTER_TIMEOUT_S) as resp:
            raw = resp.read(ROUTER_MAX_BYTES + 1)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise Usage(f"--from-router: {url} does not answer: {exc}") from None
    if len(raw) > ROUTER_MAX_BYTES:
        raise Usage(f"--from-router: {url} answered more than {ROUTER_MAX_BYTES} bytes")
    try:
        return json.loads(raw)
    except ValueError:
        raise Usage(f"--from-router: {url} answered no JSON") from None


def router_workers(doc: Any) -> tuple[list[str], list[str]]:
    """The prefill and decode URLs of vllm-router's /workers ({"workers": [{"url",
    "worker_type"}, ...]}), in its order."""
    workers = doc.get("workers") if isinstance(doc, dict) else None
    if not isinstance(workers, list):
        raise Usage("--from-router: its /workers has no worker list (is it vllm-router?)")
    found: dict[str, list[str]] = {"prefill": [], "decode": []}
    for w in workers:
        if isinstance(w, dict) and isinstance(w.get("url"), str):
            found.get(str(w.get("worker_type")), []).append(w["url"])
    if not found["prefill"] or not found["decode"]:
        raise Usage(
            f"--from-router: it routes to {len(found['prefill'])} prefill and "
            f"{len(found['decode'])} decode instance(s); a PD deployment needs both"
        )
    return found["prefill"], found["decode"]


def attached_spec(
    name: str,
    prefill: list[str],
    decode: list[str],
    model: str,
    connector: str,
    mode: str | None,
    proxy: str | None,
    proxy_kind: str,
    discover: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The spec `pdctl attach` stores: one group per role, one instance per URL, or where
    each role's instances are discovered (`discover`: role -> the group's discover)."""

    def group(role: str, urls: list[str]) -> dict[str, Any]:
        if discover is not None:
            return {"name": role, "role": role, "discover": discover[role], "mode": mode}
        return {"name": role, "role": role, "count": len(urls), "urls": urls, "mode": mode}

    return {
        "name": name,
        "engine": "external",
        "model": model,
        "topology": "disaggregated",
        "connector": connector,
        "groups": [group("prefill", prefill), group("decode", decode)],
        "external_proxy": {"url": proxy, "kind": proxy_kind} if proxy else None,
    }


def _by_flag(exc: ApiError) -> Exception:
    """A 422 about an address, told by the flag that gave it (`--decode URL: ...`)."""
    items = exc.detail if isinstance(exc.detail, list) else []
    for item in items:
        loc = [p for p in item.get("loc", []) if p != "body"]
        if loc[:1] == ["groups"] and len(loc) >= 4 and loc[2] == "urls":
            flag = ("--prefill", "--decode")[loc[1]] if loc[1] in (0, 1) else "--prefill"
            return Usage(f"{flag} {loc[3] + 1}: {item.get('msg')}")
        if loc[:1] == ["groups"] and len(loc) >= 3 and loc[2] == "discover":
            field = loc[3] if len(loc) >= 4 else None
            flag = DISCOVER_FLAGS.get(str(field), "--discover-prometheus/--discover-router")
            return Usage(f"{flag}: {item.get('msg')}")
        if loc[:1] == ["external_proxy"]:
            flag = "--proxy-kind" if loc[-1] == "kind" else "--proxy"
            return Usage(f"{flag}: {item.get('msg')}")
        if loc[:1] in (["model"], ["connector"], ["name"]):
            return Usage(f"--{loc[0]}: {item.get('msg')}" if loc[0] != "name" else item["msg"])
    return exc
