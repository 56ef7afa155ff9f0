"""`pdctl attach NAME --prefill URL... --decode URL... [--proxy URL] [--proxy-kind K]`: store
an attached deployment (engine `external`): engines someone else started, which pdctl watches
(live frames, "is PD happening", the canary, health events) and never starts, stops or
restarts. A refused address is the API's 422, told by the flag that gave it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from terminal.client import ApiError
from terminal.session import JsonOption, ReasonOption, ServerOption, Usage, client, show_json
from terminal.verbs.read import Name

PROXY_KINDS = ("pdctl", "vllm-router", "other")
Urls = Annotated[
    list[str],
    typer.Option(help="An instance's base URL, e.g. http://127.0.0.1:8100 (repeat for more)."),
]


def attach(
    name: Name,
    prefill: Urls,
    decode: Urls,
    model: Annotated[str, typer.Option(help="The model the engines serve.")] = "tiny",
    connector: Annotated[str, typer.Option(help="Their KV connector.")] = "NixlConnector",
    mode: Annotated[
        str | None, typer.Option(help="read or write, for a connector with modes (MoRIIO).")
    ] = None,
    proxy: Annotated[
        str | None, typer.Option(help="The proxy clients send to; the canary goes there.")
    ] = None,
    proxy_kind: Annotated[str, typer.Option(help="pdctl, vllm-router or other.")] = "other",
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Watch a PD deployment pdctl did not start, by its instances' addresses."""
    if proxy_kind not in PROXY_KINDS:
        raise Usage(f"--proxy-kind {proxy_kind!r}: one of {', '.join(PROXY_KINDS)}")
    if proxy is None and proxy_kind != "other":
        raise Usage("--proxy-kind goes with --proxy URL")
    spec = attached_spec(name, prefill, decode, model, connector, mode, proxy, proxy_kind)
    try:
        made = client(server).post("/api/deployments", spec, reason=reason)
    except ApiError as exc:
        raise _by_flag(exc) from None
    if as_json:
        show_json(made)
        return
    groups = made["spec"]["groups"]
    count = sum(len(g["urls"]) for g in groups)
    via = f" behind {proxy_kind} {proxy}" if proxy else ""
    typer.echo(f"{name}: attached {count} instance(s){via} (revision {made['revision']})")


def attached_spec(
    name: str,
    prefill: list[str],
    decode: list[str],
    model: str,
    connector: str,
    mode: str | None,
    proxy: str | None,
    proxy_kind: str,
) -> dict[str, Any]:
    """The spec `pdctl attach` stores: one group per role, one instance per URL."""

    def group(role: str, urls: list[str]) -> dict[str, Any]:
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
        if loc[:1] == ["external_proxy"]:
            flag = "--proxy-kind" if loc[-1] == "kind" else "--proxy"
            return Usage(f"{flag}: {item.get('msg')}")
        if loc[:1] in (["model"], ["connector"], ["name"]):
            return Usage(f"--{loc[0]}: {item.get('msg')}" if loc[0] != "name" else item["msg"])
    return exc
