"""`pdctl bench`: offer load to an OpenAI-compatible server and measure it against an SLO.

This module only turns flags into a BenchConfig, runs it and prints; bad input becomes one
line on stderr naming the flag, with exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console

from bench import model_prompts, target
from bench.client import ServerUnreachable
from bench.config import (
    BenchConfig,
    BenchConfigError,
    parse_headers,
    parse_itl_stat,
    parse_rates,
    validate,
)
from bench.progress import ProgressFile
from bench.records import SloTargets
from bench.report import (
    lag_warning,
    partial_document,
    result_document,
    summary_table,
    sweep_table,
)
from bench.runner import RunOutcome, run_bench
from bench.turns import chat_sessions
from bench.whole_file import write_whole

T = TypeVar("T")
USAGE_ERROR = 2
INTERRUPTED = 130


def register(app: typer.Typer) -> None:
    app.command("bench", help="Offer load to a server and measure TTFT, ITL and goodput.")(bench)


def bench(
    base_url: Annotated[
        str | None,
        typer.Option(help="Server to load, e.g. http://127.0.0.1:8000 (or --deployment)"),
    ] = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            help="A deployment stored in `pdctl serve`: load its proxy, judged by its SLO "
            "unless --slo-* say otherwise (instead of --base-url)",
            show_default=False,
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="With --deployment: the control plane (default PDCTL_SERVER, the config "
            "file's, http://127.0.0.1:8000; the token from PDCTL_TOKEN)",
            show_default=False,
        ),
    ] = None,
    request_rate: Annotated[
        str, typer.Option(help="Requests/s: one rate or a comma list to sweep; inf = all at once")
    ] = "inf",
    num_prompts: Annotated[int, typer.Option(help="Requests per rate")] = 100,
    input_len: Annotated[
        int, typer.Option(help="Prompt tokens (the unique part for shared-prefix)")
    ] = 1024,
    output_len: Annotated[int, typer.Option(help="Output tokens asked for (max_tokens)")] = 128,
    range_ratio: Annotated[
        float, typer.Option(help="Lengths drawn uniformly from [L*(1-r), L*(1+r)], r in [0, 1)")
    ] = 0.0,
    dataset: Annotated[
        str,
        typer.Option(
            help="random | shared-prefix | multi-turn | chat-sessions (each turn sends the "
            "server's own answers: what bidirectional KV needs; --num-prompts conversations)"
        ),
    ] = "random",
    prefix_len: Annotated[int, typer.Option(help="shared-prefix: tokens of each prefix")] = 256,
    num_prefixes: Annotated[int, typer.Option(help="shared-prefix: distinct prefixes")] = 1,
    turns: Annotated[int, typer.Option(help="multi-turn: turns per conversation")] = 4,
    user_len: Annotated[
        int, typer.Option(help="chat-sessions: tokens of each later user message")
    ] = 100,
    endpoint: Annotated[str, typer.Option(help="completions | chat")] = "completions",
    model: Annotated[str | None, typer.Option(help="Model name (default: ask /v1/models)")] = None,
    burstiness: Annotated[
        float, typer.Option(help="Gamma shape of the arrival gaps; 1 = Poisson, <1 burstier")
    ] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(help="Cap on requests in flight")] = None,
    seed: Annotated[int, typer.Option(help="Seed for prompts and arrivals")] = 0,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT target per request (ms)")] = None,
    slo_itl_ms: Annotated[float | None, typer.Option(help="ITL target per request (ms)")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT target per request (ms)")] = None,
    itl_slo_stat: Annotated[
        str | None,
        typer.Option(
            help="Per-request ITL statistic judged: mean | p99 | max (default p99, or the "
            "deployment's)",
            show_default=False,
        ),
    ] = None,
    goodput_share: Annotated[
        float, typer.Option(help="slo_attainment a rate needs to count for max_goodput_rate")
    ] = 0.9,
    result_json: Annotated[
        Path | None,
        typer.Option(help="Write the result here; a sweep keeps each rate here as it ends"),
    ] = None,
    save_requests: Annotated[
        bool, typer.Option("--save-requests", help="Put per-request records in --result-json")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Per-request timeout (s)")] = 300.0,
    ignore_eos: Annotated[
        bool, typer.Option(help="Ask for exactly --output-len tokens (ignore_eos)")
    ] = True,
    prompt_token_ids: Annotated[
        bool, typer.Option(help="completions: send prompts as token id lists")
    ] = False,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="The model's tokenizer.json (or its folder): random prompts of --input-len of "
            "its tokens, sent as text, as `vllm bench serve --tokenizer` makes them"
        ),
    ] = None,
    arrivals: Annotated[
        str,
        typer.Option(
            help="vllm: the arrival times `vllm bench serve` uses for the same --seed, "
            "--request-rate, --burstiness (what `pdctl plan` replays) | pdctl: free seeded "
            "gamma gaps"
        ),
    ] = "vllm",
    workers: Annotated[
        int,
        typer.Option(
            help="Processes offering the load (each a share of the requests, one summary), "
            "for when one event loop cannot keep up; --max-concurrency is split between them"
        ),
    ] = 1,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", help="KEY=VALUE: a header every request carries (repeatable)"),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar")] = False,
    progress_file: Annotated[
        Path | None,
        typer.Option(help="Keep a JSON object of requests done/total here (bench/progress.py)"),
    ] = None,
) -> None:
    try:
        slo = SloTargets(
            slo_ttft_ms, slo_itl_ms, slo_tpot_ms, parse_itl_stat(itl_slo_stat or "p99")
        )
    except BenchConfigError as exc:
        _fail(f"invalid value for {exc}")
    base_url, slo, keeper = _where(base_url, deployment, server, slo, itl_slo_stat is not None)
    if dataset == chat_sessions.NAME:
        flags = chat_sessions.SessionFlags(
            request_rate, num_prompts, turns, input_len, user_len, output_len, seed, timeout
        )
        _chat_sessions(base_url, model, flags, result_json)
        return
    try:
        config = validate(
            BenchConfig(
                base_url=base_url,
                request_rates=parse_rates(request_rate),
                num_prompts=num_prompts,
                input_len=input_len,
                output_len=output_len,
                range_ratio=range_ratio,
                dataset=dataset,
                prefix_len=prefix_len,
                num_prefixes=num_prefixes,
                turns=turns,
                endpoint=endpoint,
                model=model,
                burstiness=burstiness,
                max_concurrency=max_concurrency,
                seed=seed,
                slo=slo,
                goodput_share=goodput_share,
                timeout=timeout,
                ignore_eos=ignore_eos,
                prompt_token_ids=prompt_token_ids,
                tokenizer=tokenizer,
                arrivals=arrivals,
                workers=workers,
                headers=parse_headers(header or []),
            )
        )
        if config.tokenizer is not None:
            model_prompts.load(config.tokenizer)
    except BenchConfigError as exc:
        _fail(f"invalid value for {exc}")
    for flag, path in (("--result-json", result_json), ("--progress-file", progress_file)):
        if path is not None and not path.parent.is_dir():
            _fail(f"{flag}: directory {path.parent} does not exist")
    progress = _progress(progress_file, config)
    console = Console(stderr=True)
    keep = _KeepMeasured(result_json, config, save_requests)
    try:
        outcomes = _run(
            run_bench(
                config,
                console,
                show_progress=not quiet and console.is_terminal,
                on_request=progress.on_request if progress else None,
                on_rate=keep if keep.wanted else None,
            )
        )
    except ServerUnreachable as exc:
        _fail(
            f"--deployment {deployment} (its proxy): {exc}" if deployment else f"--base-url: {exc}"
        )
    except KeyboardInterrupt:
        kept = (
            f"; the {keep.rates_kept} rate(s) measured are in --result-json {result_json}"
            if keep.rates_kept
            else ""
        )
        typer.echo(f"interrupted{kept}", err=True)
        raise typer.Exit(INTERRUPTED) from None
    document = result_document(
        [o.summary for o in outcomes],
        [o.records for o in outcomes],
        config.goodput_share,
        save_requests,
    )
    _show(outcomes, document, console)
    if result_json is not None:
        _write(result_json, document)
    if keeper is not None:
        _keep(keeper, config, document, console)


def _keep(
    keep: target.Keeper, config: BenchConfig, document: dict[str, Any], console: Console
) -> None:
    """Hand a --deployment run to its control plane, which lists it in the deployment page's
    Bench panel; a refusal is a warning: the measurement above stands."""
    try:
        said = keep(run_settings(config), document)
    except target.TargetUnresolved as exc:
        console.print(f"[yellow]Warning: the run was not kept by the control plane: {exc.message}")
        return
    console.print(said)


def run_settings(config: BenchConfig) -> dict[str, Any]:
    """What a kept run says it was asked (services/bench_runs/reported.py ReportedConfig)."""
    return {
        "rates": ["inf" if math.isinf(r) else r for r in config.request_rates],
        "num_prompts": config.num_prompts,
        "input_len": config.input_len,
        "output_len": config.output_len,
        "dataset": config.dataset,
        "slo_ttft_ms": config.slo.ttft_ms,
        "slo_itl_ms": config.slo.itl_ms,
        "itl_slo_stat": str(config.slo.itl_stat),
        "burstiness": config.burstiness,
        "seed": config.seed,
    }


def _chat_sessions(
    base_url: str, model: str | None, flags: chat_sessions.SessionFlags, result_json: Path | None
) -> None:
    if problem := chat_sessions.check(flags):
        _fail(problem)
    if result_json is not None and not result_json.parent.is_dir():
        _fail(f"--result-json: directory {result_json.parent} does not exist")
    try:
        model, records, summaries = _run(chat_sessions.run(base_url, model, flags))
    except ServerUnreachable as exc:
        _fail(f"--base-url: {exc}")
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        raise typer.Exit(INTERRUPTED) from None
    document = chat_sessions.document(model, flags, records, summaries)
    Console().print(chat_sessions.table(document))
    if document["failed"]:
        typer.echo(f"{document['failed']} turn(s) failed: {document['errors'][0]}", err=True)
    if result_json is not None:
        _write(result_json, document)


def _where(
    base_url: str | None,
    deployment: str | None,
    server: str | None,
    slo: SloTargets,
    stat_given: bool,
) -> tuple[str, SloTargets, target.Keeper | None]:
    """The URL to load and the SLO: the flags', or the stored deployment's (bench/target.py),
    and with --deployment, who keeps the finished run."""
    if base_url is not None and deployment is not None:
        _fail("--base-url and --deployment are exclusive: give one (--deployment loads its proxy)")
    if server is not None and deployment is None:
        _fail("--server goes with --deployment (the control plane that stores it)")
    if deployment is None:
        if base_url is None:
            _fail("give --base-url URL (a server to load) or --deployment NAME (a stored one)")
        return base_url, slo, None
    try:
        found = target.resolve(deployment, server)
    except target.TargetUnresolved as exc:
        typer.echo(f"Error: --deployment {deployment}: {exc.message}", err=True)
        raise typer.Exit(exc.code) from None
    return found.base_url, target.with_defaults(slo, found.slo, stat_given), found.keep


def _show(outcomes: list[RunOutcome], document: dict[str, Any], console: Console) -> None:
    """The table on stdout (so it can be piped); progress and warnings went to stderr."""
    out = Console()
    if len(outcomes) == 1:
        out.print(summary_table(outcomes[0].summary))
    else:
        out.print(sweep_table(document))
    for outcome in outcomes:
        if warning := lag_warning(outcome.summary):
            console.print(f"[yellow]{warning}[/yellow]")


def _progress(path: Path | None, config: BenchConfig) -> ProgressFile | None:
    if path is None:
        return None
    try:
        return ProgressFile(path, config.request_rates, config.num_prompts)
    except OSError as exc:
        _fail(f"--progress-file: cannot write {path}: {exc.strerror}")


class _KeepMeasured:
    """After each rate of a sweep but the last, the rates measured so far go to --result-json
    (report.py `partial_document`), so a sweep stopped or killed part-way keeps them. Written
    between rates, so the disk never delays a request being measured."""

    def __init__(self, path: Path | None, config: BenchConfig, save_requests: bool) -> None:
        self.path, self.config, self.save_requests = path, config, save_requests
        self.rates = len(config.request_rates)
        self.wanted = path is not None and self.rates > 1
        self.rates_kept = 0

    def __call__(self, outcomes: list[RunOutcome]) -> None:
        if self.path is None or len(outcomes) == self.rates:
            return  # the whole result follows
        document = partial_document(
            [o.summary for o in outcomes],
            [o.records for o in outcomes],
            self.config.goodput_share,
            self.save_requests,
            self.rates,
        )
        with contextlib.suppress(OSError):  # the final write says what is wrong with the disk
            write_whole(self.path, json.dumps(document, indent=2, allow_nan=False) + "\n")
            self.rates_kept = len(outcomes)


def _write(path: Path, document: dict[str, Any]) -> None:
    try:
        write_whole(path, json.dumps(document, indent=2, allow_nan=False) + "\n")
    except OSError as exc:
        _fail(f"--result-json: cannot write {path}: {exc.strerror}")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop when available: the bench's own loop speed is part of what it measures."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


def _fail(message: str) -> NoReturn:
    typer.echo(f"Error: {message}", err=True)
    raise typer.Exit(USAGE_ERROR)
