"""`pdctl plan` and `pdctl kv`: the what-if planner and the KV calculator on the terminal."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from domain import profiles
from domain.kv_connectors import proxy_backend, proxy_names
from domain.measures.slo import ItlStat, SloTargets
from simulator.model.calibration.profile import CalibratedProfile, ProfileError
from simulator.plan.calibration import cli as calibrate_cli
from simulator.plan.nodes.placement import PLACEMENTS, resolve_nodes
from simulator.plan.planner import (
    PLAN_DEFAULTS,
    PLAN_RATE,
    PLAN_SLO,
    EngineFlags,
    PlanError,
    PlanSetup,
    Workload,
    search,
    sweep,
)
from simulator.plan.printing import emit, emit_fidelity
from simulator.plan.scenarios import DEFAULT_SEEDS, SCENARIOS, named_config

CONNECTOR_HELP = " or ".join(proxy_names()) + "."
WORKLOAD = Workload()  # the planner's default workload (simulator/plan/setup.py)


def register(app: typer.Typer) -> None:
    app.command("plan", help="What-if: serve a workload on candidate layouts, virtually.")(plan)
    app.command("kv", help="KV-cache bytes of a prompt and its transfer time.")(kv)
    calibrate_cli.register(app)


def parse_rates(text: str) -> list[float]:
    """`8`, `1,2,4` or `0.5:10:0.5` (start:stop:step, inclusive)."""
    try:
        if ":" in text:
            start, stop, step = (float(x) for x in text.split(":"))
            if not all(map(math.isfinite, (start, stop, step))) or step <= 0 or stop < start:
                raise ValueError
            count = round((stop - start) / step) + 1
            return [round(start + i * step, 6) for i in range(count)]
        rates = [float(x) for x in text.split(",")]
    except ValueError:
        raise PlanError(
            f"--rate {text!r}: expected R, R1,R2,... or start:stop:step, finite numbers"
        ) from None
    if not all(math.isfinite(r) and r > 0 for r in rates):
        raise PlanError(f"--rate {text!r}: values must be finite numbers > 0")
    return rates


def plan(
    scenario: str | None = typer.Option(
        None, "--scenario", help=f"Built-in: {', '.join(SCENARIOS)}."
    ),
    model: str = typer.Option(
        PLAN_DEFAULTS.model, "--model", help="A profile, or a model folder or its config.json."
    ),
    hardware: str = typer.Option(PLAN_DEFAULTS.hardware, "--hardware"),
    gpus: int | None = typer.Option(
        None,
        "--gpus",
        help=f"GPUs in all (default {PLAN_DEFAULTS.gpus}, or --nodes x --gpus-per-node); "
        "the budget --search fills.",
    ),
    nodes: int | None = typer.Option(
        None, "--nodes", help="Nodes (default: as many as --gpus needs)."
    ),
    gpus_per_node: int | None = typer.Option(
        None, "--gpus-per-node", help="Default: the hardware profile's (8). No TP spans nodes."
    ),
    nics_per_node: int | None = typer.Option(
        None, "--nics-per-node", help="NICs between nodes; default: the hardware profile's."
    ),
    nic_gbps: float | None = typer.Option(
        None, "--nic-gbps", help="Gb/s (bits) per NIC, as datasheets give it; default: profile's."
    ),
    placement: str = typer.Option(
        PLAN_DEFAULTS.placement,
        "--placement",
        help="pack: fill nodes in turn; split: prefills and decodes on separate nodes.",
    ),
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config",
            help="2xtp4, 1p-tp4+1d-tp4:write or a scenario's name (disagg-read ...); repeat.",
        ),
    ] = None,
    rate: str | None = typer.Option(
        None,
        "--rate",
        help="R, R1,R2 or start:stop:step (default 8; a scenario's own rates unless given).",
    ),
    num_prompts: int = typer.Option(WORKLOAD.num_prompts, "--num-prompts"),
    input_len: int = typer.Option(WORKLOAD.input_len, "--input-len"),
    output_len: int = typer.Option(WORKLOAD.output_len, "--output-len"),
    range_ratio: float = typer.Option(WORKLOAD.range_ratio, "--range-ratio"),
    burstiness: float = typer.Option(WORKLOAD.burstiness, "--burstiness"),
    seed: int = typer.Option(WORKLOAD.seed, "--seed"),
    shared_prefix_len: int = typer.Option(WORKLOAD.shared_prefix_len, "--shared-prefix-len"),
    slo_ttft_ms: float = typer.Option(PLAN_SLO.ttft_ms, "--slo-ttft-ms"),
    slo_itl_ms: float = typer.Option(PLAN_SLO.itl_ms, "--slo-itl-ms"),
    itl_slo_stat: str = typer.Option(PLAN_SLO.itl_stat.value, "--itl-slo-stat"),
    goodput_share: float = typer.Option(PLAN_DEFAULTS.goodput_share, "--goodput-share"),
    link_gbps: float | None = typer.Option(
        None, "--link-gbps", help="GB/s between P and D (default NICs x TP)."
    ),
    max_num_seqs: int | None = typer.Option(
        None, "--max-num-seqs", help="Colocated engines; default: vLLM's for the device."
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Colocated engines; default: vLLM's."
    ),
    pd_max_num_seqs: int | None = typer.Option(
        None, "--pd-max-num-seqs", help="Prefill and decode engines; default: vLLM's."
    ),
    pd_max_num_batched_tokens: int | None = typer.Option(
        None, "--pd-max-num-batched-tokens", help="Prefill and decode engines; default: vLLM's."
    ),
    prefix_caching: bool | None = typer.Option(
        None, "--prefix-caching/--no-prefix-caching", help="Default: on, as vLLM's."
    ),
    do_search: bool = typer.Option(
        False, "--search", help="Rank every layout of the GPU budget on the nodes."
    ),
    fidelity: bool = typer.Option(
        False,
        "--fidelity",
        help="Every published figure the model is held against, the model's value, the error.",
    ),
    seeds: int = typer.Option(
        DEFAULT_SEEDS, "--seeds", help="Arrival sequences at the published rate (scenarios)."
    ),
    calibration: Annotated[
        Path | None,
        typer.Option(
            "--calibration",
            help="A profile from `pdctl calibrate`: its TP's engines run on measured steps.",
        ),
    ] = None,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=260)  # a pipe or a file gets whole rows, not wrapped cells
    try:
        if fidelity:
            if not 1 <= seeds <= 200:
                raise PlanError("--seeds must be between 1 and 200")
            from simulator.plan.fidelity import fidelity_table

            emit_fidelity(fidelity_table(seeds), as_json, console)
            return
        if scenario == "fidelity":
            raise PlanError("--scenario fidelity: use --fidelity")
        if scenario is not None:
            if scenario not in SCENARIOS:
                raise PlanError(f"--scenario {scenario!r}: known: {', '.join(SCENARIOS)}")
            if not 1 <= seeds <= 200:
                raise PlanError("--seeds must be between 1 and 200")
            result = (
                SCENARIOS[scenario]()
                if scenario == "saturation"
                else SCENARIOS[scenario](rates=parse_rates(rate) if rate else None, seeds=seeds)
            )
            emit(result, as_json, console)
            return
        _checks(
            model,
            hardware,
            num_prompts,
            input_len,
            output_len,
            range_ratio,
            burstiness,
            goodput_share,
            itl_slo_stat,
        )
        rates = parse_rates(rate) if rate else [PLAN_RATE]
        _check_engine_flags(
            {
                "--max-num-seqs": max_num_seqs,
                "--max-num-batched-tokens": max_num_batched_tokens,
                "--pd-max-num-seqs": pd_max_num_seqs,
                "--pd-max-num-batched-tokens": pd_max_num_batched_tokens,
            }
        )
        flags = EngineFlags(max_num_seqs, max_num_batched_tokens, prefix_caching)
        pd_flags = EngineFlags(pd_max_num_seqs, pd_max_num_batched_tokens, prefix_caching)
        budget, nodes, gpus_per_node = resolve_nodes(
            gpus,
            nodes,
            gpus_per_node,
            profiles.hardware(hardware).gpus_per_node,
            PLAN_DEFAULTS.gpus,
        )
        _check_fabric(nics_per_node, nic_gbps, placement)
        setup = PlanSetup(
            model,
            hardware,
            budget,
            flags,
            pd_flags,
            pd_flags,
            link_gbps,
            slo=SloTargets(
                slo_ttft_ms, slo_itl_ms, None, ItlStat(itl_slo_stat)
            ),  # _checks checked it
            goodput_share=goodput_share,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            nics_per_node=nics_per_node,
            nic_gbit=nic_gbps,
            placement=placement,
            calibration=_calibration(calibration, model, hardware),
        )
        workload = Workload(
            num_prompts, input_len, output_len, range_ratio, burstiness, seed, shared_prefix_len
        )
        started = time.perf_counter()
        if do_search:
            result = search(setup, workload, rates)
        else:
            configs = [named_config(c) for c in config or ["1xtp8"]]
            result = sweep(setup, configs, workload, rates)
        result["wall_s"] = round(time.perf_counter() - started, 3)
    except (PlanError, ProfileError, profiles.UnknownProfile) as exc:
        typer.echo(f"pdctl plan: error: {exc}", err=True)
        raise typer.Exit(2) from None
    emit(result, as_json, console)


def _calibration(path: Path | None, model: str, hardware: str) -> CalibratedProfile | None:
    """The profile of --calibration, if it was fitted for this model on this hardware."""
    if path is None:
        return None
    profile = calibrate_cli.read_profile(path)
    for flag, given, fitted in (
        ("--model", model, profile.model),
        ("--hardware", hardware, profile.hardware),
    ):
        if given != fitted:
            raise PlanError(f"--calibration {path}: fitted for {flag} {fitted}, not {given}")
    return profile


def _check_engine_flags(values: dict[str, int | None]) -> None:
    for flag, value in values.items():
        if value is not None and not 1 <= value <= 1_048_576:
            raise PlanError(f"{flag} must be between 1 and 1048576")


def _check_fabric(nics_per_node: int | None, nic_gbps: float | None, placement: str) -> None:
    if nics_per_node is not None and not 1 <= nics_per_node <= 64:
        raise PlanError(f"--nics-per-node must be between 1 and 64, got {nics_per_node}")
    if nic_gbps is not None and not 0 < nic_gbps <= 100_000:
        raise PlanError(f"--nic-gbps must be in (0, 100000] Gb/s, got {nic_gbps:g}")
    if placement not in PLACEMENTS:
        raise PlanError(f"--placement must be {' or '.join(PLACEMENTS)}, got {placement!r}")


def _checks(
    model,
    hardware,
    num_prompts,
    input_len,
    output_len,
    range_ratio,
    burstiness,
    goodput_share,
    itl_slo_stat,
) -> None:
    try:
        profiles.model(model)
    except profiles.ModelConfigError as exc:
        raise PlanError(f"--model {exc}") from None
    profiles.hardware(hardware)
    for ok, message in (
        (1 <= num_prompts <= 100_000, "--num-prompts must be between 1 and 100000"),
        (input_len >= 1 and output_len >= 1, "--input-len and --output-len must be >= 1"),
        (0 <= range_ratio < 1, "--range-ratio must be in [0, 1)"),
        (burstiness > 0, "--burstiness must be > 0"),
        (0 < goodput_share <= 1, "--goodput-share must be in (0, 1]"),
        (itl_slo_stat in ("mean", "p99", "max"), "--itl-slo-stat must be mean, p99 or max"),
    ):
        if not ok:
            raise PlanError(message)


def kv(
    model: str = typer.Option("llama-3.1-70b", "--model"),
    tokens: int = typer.Option(10_000, "--tokens"),
    hardware: str = typer.Option("h100", "--hardware"),
    tp: int = typer.Option(1, "--tp", help="NICs used (one per TP rank)."),
    link_gbps: float | None = typer.Option(None, "--link-gbps", help="GB/s, overrides NICs."),
    connector: str = typer.Option("nixl", "--connector", help=CONNECTOR_HELP),
    block_size: int | None = typer.Option(
        None, "--block-size", help="KV block size; default: vLLM's for the device."
    ),
    decode_step_ms: float | None = typer.Option(
        None, "--decode-step-ms", help="The decode's step; default: modelled at batch 32."
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    try:
        spec, hw = profiles.model(model), profiles.hardware(hardware)
    except profiles.ModelConfigError as exc:
        _kv_error(f"--model {exc}")
    except profiles.UnknownProfile as exc:
        _kv_error(str(exc))
    if tokens < 1 or tp < 1 or (link_gbps is not None and not 0 < link_gbps < math.inf):
        _kv_error("--tokens, --tp and --link-gbps must be positive (and --link-gbps finite)")
    if connector not in proxy_names():
        _kv_error(f"--connector must be one of {', '.join(proxy_names())}, got {connector!r}")
    if block_size is not None and block_size < 1:
        _kv_error(f"--block-size must be a positive number of tokens, got {block_size}")
    if decode_step_ms is not None and not 0 <= decode_step_ms < 1e6:
        _kv_error(f"--decode-step-ms must be >= 0, got {decode_step_ms:g}")
    from simulator.model.calculator import kv_report

    report = kv_report(
        spec,
        hw,
        tokens,
        tp,
        link_gbps,
        proxy_backend(connector).connector,
        block_size,
        decode_step_ms,
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    rows = report.pop("handoff")
    for key, value in report.items():
        typer.echo(f"{key:<28} {value}")
    console = Console(width=140)
    table = Table(
        "path",
        "GB/s",
        "descriptors",
        *(f"{part} ms" for part in ("setup", "post", "staging", "wire", "notice", "total")),
        "x bandwidth",
        title="The hand-off, part by part (notice: half a decode step, on average)",
    )
    for row in rows:
        table.add_row(
            row["path"],
            f"{row['gbps']:g}",
            f"{row['descriptors']:,}",
            *(
                f"{row[f'{part}_ms']:g}"
                for part in ("setup", "post", "staging", "wire", "notice", "total")
            ),
            f"{row['times_bandwidth']:g}",
        )
    console.print(table)


def _kv_error(message: str) -> None:
    typer.echo(f"pdctl kv: error: {message}", err=True)
    raise typer.Exit(2)
