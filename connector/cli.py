"""`pdctl proxy`: argument parsing only; the proxy lives in connector.proxy and connector.server."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Annotated

import typer

from domain.slo import DEFAULT_ITL_STAT, SloTargets


def proxy(
    port: Annotated[int, typer.Option(help="HTTP port of the proxy.")],
    host: Annotated[str, typer.Option(help="Address to bind (HTTP and registry).")] = "127.0.0.1",
    connector: Annotated[str, typer.Option(help="KV connector: nixl | moriio.")] = "nixl",
    mode: Annotated[
        str, typer.Option(help="Mode of the instances given by flag: read | write | colocated.")
    ] = "read",
    prefill: Annotated[
        list[str] | None,
        typer.Option(help="Prefill URL, optionally URL#host:IP,handshake:P,notify:P (repeat)."),
    ] = None,
    decode: Annotated[list[str] | None, typer.Option(help="Decode URL (repeat).")] = None,
    instance: Annotated[
        list[str] | None, typer.Option(help="Colocated instance URL (repeat; --mode colocated).")
    ] = None,
    encode: Annotated[
        list[str] | None,
        typer.Option(help="Encode instance URL (repeat): chat images go there before prefill."),
    ] = None,
    render: Annotated[
        list[str] | None,
        typer.Option(help="Render tier URL (repeat): completions are rendered to token ids there."),
    ] = None,
    registry_port: Annotated[
        int, typer.Option(help="ZMQ registry port (MoRIIO proxy_ping_port); -1 disables.")
    ] = 36367,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT target in ms.")] = None,
    slo_itl_ms: Annotated[float | None, typer.Option(help="ITL target in ms.")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT target in ms.")] = None,
    itl_slo_stat: Annotated[
        str, typer.Option(help="Per-request ITL statistic judged: mean | p99 | max.")
    ] = DEFAULT_ITL_STAT.value,
    policy: Annotated[str, typer.Option(help="Pair selection: round-robin | least-tokens.")] = (
        "round-robin"
    ),
    ttft_parts: Annotated[
        bool,
        typer.Option(
            "--ttft-parts/--no-ttft-parts",
            help="Split each request's TTFT into queue, retry, prefill, transfer and decode.",
        ),
    ] = True,
    bidirectional_kv: Annotated[
        bool,
        typer.Option(
            "--bidirectional-kv/--no-bidirectional-kv",
            help="NIXL bidirectional KV: a conversation's next prefill pulls the blocks its "
            "last decode kept (the engines' bidirectional_kv_xfer must be on too).",
        ),
    ] = False,
    kv_blocks_ttl: Annotated[
        float, typer.Option(help="Seconds a decode keeps a turn's blocks (decoder_kv_blocks_ttl).")
    ] = 480.0,
    bidir_max_conversations: Annotated[
        int, typer.Option(help="Conversations whose KV params the proxy keeps (LRU).")
    ] = 10_000,
    admin_token: Annotated[
        str | None,
        typer.Option(
            help="Bearer token for /admin (better from the environment, PDCTL_ADMIN_TOKEN: "
            "argv is readable by every local user). Without one, a token is generated and "
            "written to --admin-token-file.",
            envvar="PDCTL_ADMIN_TOKEN",
            show_envvar=False,
        ),
    ] = None,
    admin_token_file: Annotated[
        str | None,
        typer.Option(
            help="Where a generated admin token is written (0600); default: "
            "$PDCTL_RUNTIME_DIR (or $XDG_RUNTIME_DIR/pdctl)/proxy-PORT.admin-token."
        ),
    ] = None,
    registry_allow: Annotated[
        list[str] | None,
        typer.Option(
            help="Address or network that may register over ZMQ, or 'any' (repeat); "
            "default loopback only. Checked against the sender and every address it names."
        ),
    ] = None,
    registry_expected: Annotated[
        str | None,
        typer.Option(
            hidden=True,
            help="JSON list of the registrations to accept, and nothing else (set by "
            "`pdctl serve`, in the environment).",
            envvar="PDCTL_REGISTRY_EXPECTED",
            show_envvar=False,
        ),
    ] = None,
    registry_max_pending: Annotated[
        int, typer.Option(help="New registrations probed at once; more wait for a place.")
    ] = 16,
    prefill_timeout: Annotated[float, typer.Option(help="Seconds for the prefill leg.")] = 120.0,
    decode_timeout: Annotated[
        float, typer.Option(help="Longest silence (s) between two decode chunks.")
    ] = 120.0,
    hold_queue: Annotated[
        int, typer.Option(help="Requests held at most while a group is paused.")
    ] = 256,
    hold_deadline: Annotated[float, typer.Option(help="Seconds a held request waits.")] = 30.0,
    eject_after: Annotated[
        int,
        typer.Option(help="Failed legs in a row after which an instance is ejected (0: never)."),
    ] = 3,
    eject_seconds: Annotated[
        float,
        typer.Option(help="Seconds an ejected instance takes no request (doubles per ejection)."),
    ] = 10.0,
    eject_max_share: Annotated[
        float, typer.Option(help="Largest share of a role's instances in a group ejected at once.")
    ] = 0.5,
    first_byte_timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds a decode leg may wait for its first byte while its instance streams "
            "nothing else, before it counts as hung (retried elsewhere, the instance ejected, "
            "with a spare). Unset: only --decode-timeout applies."
        ),
    ] = None,
    retry_attempts: Annotated[
        int, typer.Option(help="Attempts per request, the first included (1: no retries).")
    ] = 3,
    retry_deadline: Annotated[
        float, typer.Option(help="Seconds after a request arrived that no new attempt starts.")
    ] = 30.0,
    retry_budget_ratio: Annotated[
        float, typer.Option(help="Retries at most this share of requests (plus the floor).")
    ] = 0.2,
    retry_min_per_s: Annotated[
        float, typer.Option(help="Retries allowed per second whatever the traffic.")
    ] = 2.0,
    retry_backoff: Annotated[
        float, typer.Option(help="Seconds before the second attempt; doubles per attempt.")
    ] = 0.02,
    startup_grace: Annotated[
        float,
        typer.Option(
            help="Seconds after start that requests wait for the first registration "
            "(registry only; engines re-register within a 3 s heartbeat)."
        ),
    ] = 5.0,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest client request body; larger ones get 413.")
    ] = 64 << 20,
    header_timeout: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's whole head.")
    ] = 10.0,
    body_timeout: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's body (then 408).")
    ] = 60.0,
    registry_max_instances: Annotated[
        int, typer.Option(help="Distinct instances the ZMQ registry accepts; more are refused.")
    ] = 256,
    heartbeat_scale: Annotated[
        float, typer.Option(hidden=True, help="Shrink the registry's heartbeat intervals (tests).")
    ] = 1.0,
    health_timeout: Annotated[
        float, typer.Option(help="Seconds a /health probe may take before it counts as failed.")
    ] = 5.0,
    health_interval: Annotated[
        float, typer.Option(hidden=True, help="Seconds between health probes; 0 disables.")
    ] = 5.0,
) -> None:
    """Run the prefill/decode proxy: split, stream, measure."""
    from connector.api.admin_token import runtime_dir, write_generated_token
    from connector.legs.retry import RetrySettings
    from connector.registry.trust import LOOPBACK, Expectations
    from connector.server import ListenError, serve
    from connector.settings import FlagInstance, ProxySettings

    try:
        expected = None
        if registry_expected:
            try:
                expected = Expectations.from_json(json.loads(registry_expected))
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"--registry-expected (PDCTL_REGISTRY_EXPECTED): {exc}") from None
        settings = ProxySettings(
            port=port,
            host=host,
            connector=connector,
            mode=mode,
            prefill=tuple(FlagInstance.parse(u) for u in prefill or ()),
            decode=tuple(FlagInstance.parse(u) for u in decode or ()),
            instance=tuple(FlagInstance.parse(u) for u in instance or ()),
            encode=tuple(FlagInstance.parse(u) for u in encode or ()),
            render=tuple(FlagInstance.parse(u) for u in render or ()),
            registry_port=None if registry_port < 0 else registry_port,
            default_registry_mode=mode if mode != "colocated" else "read",
            slo=SloTargets(slo_ttft_ms, slo_itl_ms, slo_tpot_ms, itl_slo_stat),
            policy=policy,
            ttft_parts=ttft_parts,
            bidirectional_kv=bidirectional_kv,
            kv_blocks_ttl=kv_blocks_ttl,
            bidir_max_conversations=bidir_max_conversations,
            admin_token=admin_token,
            prefill_timeout=prefill_timeout,
            decode_timeout=decode_timeout,
            hold_queue=hold_queue,
            hold_deadline=hold_deadline,
            startup_grace=startup_grace,
            eject_after=eject_after,
            eject_seconds=eject_seconds,
            eject_max_share=eject_max_share,
            first_byte_timeout=first_byte_timeout,
            retry=RetrySettings(
                attempts=retry_attempts,
                deadline_s=retry_deadline,
                ratio=retry_budget_ratio,
                min_per_s=retry_min_per_s,
                backoff_s=retry_backoff,
                backoff_max_s=max(0.5, retry_backoff),
            ),
            max_body_bytes=max_body_bytes,
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            registry_max_instances=registry_max_instances,
            registry_max_pending=registry_max_pending,
            registry_allow=tuple(registry_allow or LOOPBACK),
            registry_expected=expected.entries() if expected is not None else None,
            heartbeat_scale=heartbeat_scale,
            health_interval=health_interval or None,
            health_timeout=health_timeout,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not admin_token:
        path = (
            Path(admin_token_file)
            if admin_token_file
            else runtime_dir() / (f"proxy-{port}.admin-token")
        )
        try:
            settings = dataclasses.replace(settings, admin_token=write_generated_token(path))
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot write the generated admin token to {path}: {exc.strerror}",
                param_hint="--admin-token-file",
            ) from None
        typer.echo(f"pdctl proxy: /admin needs the token written to {path} (0600)", err=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        serve(settings)
    except ListenError as exc:
        typer.echo(f"pdctl proxy: {exc}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.command("proxy")(proxy)
