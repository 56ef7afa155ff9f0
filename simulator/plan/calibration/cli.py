"""`pdctl calibrate`: fit the timing model to a saved `pdctl bench` result, or to a running
deployment's own traffic (`--deployment`: the control plane reads its proxy's log and keeps
the profile for it), write the calibrated profile, print its error on the measurements it did
not fit. The deployment is asked through the control plane's API: the terminal's operator
verbs hand in the caller (`use_deployment_caller`), as for `pdctl bench --deployment`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from domain import profiles
from simulator.model.calibration.profile import CalibratedProfile, ProfileError, from_json
from simulator.plan.calibration.fitting import CalibrationError, calibrate

# The bench result's fields a CalibrationError can name, and the flag that brought them.
FIELD_FLAGS = {"model_id": "--model", "hold_out_rate": "--hold-out-rate", "config": "--config"}


def register(app: typer.Typer) -> None:
    app.command(
        "calibrate",
        help="Fit the planner's step timing to a `pdctl bench --save-requests` result, or to "
        "a running deployment's own traffic (--deployment).",
    )(calibrate_verb)


# (deployment, --server, request body) -> (the API's answer: {"profile", "report", ...}, "",
# 0), or (None, the control plane's one-line refusal, the exit code it maps to)
DeploymentCaller = Callable[
    [str, str | None, dict[str, Any]], tuple[dict[str, Any] | None, str, int]
]
_caller: list[DeploymentCaller] = []


def use_deployment_caller(caller: DeploymentCaller) -> None:
    _caller[:] = [caller]


def calibrate_verb(
    bench: Annotated[
        list[Path] | None,
        typer.Option(
            "--bench",
            help="A `pdctl bench --save-requests` result JSON; repeat for runs at other rates "
            "(a different --seed each, or the server's prefix cache holds the prompts).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="The model profile that was benched.", show_default=False),
    ] = None,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware", help="The cluster's hardware, as the planner is told.", show_default=False
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Where to write the calibrated profile.", show_default=False),
    ] = None,
    deployment: Annotated[
        str | None,
        typer.Option(
            "--deployment",
            help="Fit a running deployment's own traffic (its proxy's last requests) and keep "
            "the profile for it; its model, hardware and layout are the deployment's.",
            show_default=False,
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="The control plane, with --deployment (default: PDCTL_SERVER, the config "
            "file's, http://127.0.0.1:8000).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            help="The layout measured: kxtpM colocated or Pp-tpX+Dd-tpX[:mode] "
            "(default: 1xtp1; with --deployment, the one it runs).",
            show_default=False,
        ),
    ] = None,
    hold_out_rate: Annotated[
        float | None,
        typer.Option(
            "--hold-out-rate",
            help="Fit without this rate and report the error on it (default: every 5th "
            "request of each rate is held out).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The error report as JSON.")] = False,
) -> None:
    if deployment is not None:
        for flag, given in (("--bench", bench), ("--model", model), ("--hardware", hardware)):
            if given:
                _fail(f"{flag}: --deployment fits the deployment's traffic and profiles")
        if hold_out_rate is not None:
            _fail("--hold-out-rate: --deployment holds out every 5th logged request")
        _from_deployment(deployment, server, config, out, as_json)
        return
    for flag, given in (("--bench", bench), ("--model", model), ("--hardware", hardware)):
        if not given:
            _fail(f"{flag} is needed (or --deployment NAME for a running deployment's traffic)")
    if out is None:
        _fail("--out is needed: where to write the calibrated profile")
    assert bench and model and hardware
    _from_bench(bench, model, hardware, out, config or "1xtp1", hold_out_rate, as_json)


def _from_bench(
    bench: list[Path],
    model: str,
    hardware: str,
    out: Path,
    config: str,
    hold_out_rate: float | None,
    as_json: bool,
) -> None:
    try:
        profiles.model(model)
    except profiles.UnknownProfile as exc:
        _fail(f"--model {exc}")
    try:
        profiles.hardware(hardware)
    except profiles.UnknownProfile as exc:
        _fail(f"--hardware {exc}")
    if not out.parent.is_dir():
        _fail(f"--out: directory {out.parent} does not exist")
    names = ", ".join(str(path) for path in bench)
    document = [read_bench(path) for path in bench]
    try:
        result = calibrate(document, model, hardware, config, hold_out_rate, source=names)
    except CalibrationError as exc:
        flag = FIELD_FLAGS.get(exc.field, f"--bench {names}")
        _fail(f"{flag}: {exc}")
    out.write_text(json.dumps(result.profile.to_json(), indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(result.report, indent=2))
        return
    show_report(result.profile, result.report, Console(width=140))
    typer.echo(f"wrote {out}: use it with `pdctl plan --calibration {out}`")


def _from_deployment(
    name: str, server: str | None, config: str | None, out: Path | None, as_json: bool
) -> None:
    if out is not None and not out.parent.is_dir():
        _fail(f"--out: directory {out.parent} does not exist")
    if not _caller:
        _fail("--deployment needs pdctl's operator verbs (terminal/)")
    body: dict[str, Any] = {"source": "live"}
    if config is not None:
        body["config"] = config
    done, why, code = _caller[0](name, server, body)
    if done is None:
        typer.echo(f"pdctl calibrate: error: --deployment {name}: {why}", err=True)
        raise typer.Exit(code)
    if out is not None:
        out.write_text(json.dumps(done["profile"], indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(done["report"], indent=2))
        return
    show_report(from_json(done["profile"]), done["report"], Console(width=140))
    kept = f"kept as {name}'s profile: its forecasts use it"
    typer.echo(kept + (f"; wrote {out}" if out is not None else ""))


def read_bench(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        _fail(f"--bench {path}: cannot read it: {exc.strerror}")
    except json.JSONDecodeError as exc:
        _fail(f"--bench {path}: not JSON ({exc.msg}, line {exc.lineno})")


def read_profile(path: Path, flag: str = "--calibration") -> CalibratedProfile:
    """A calibrated profile file, or a one-line error naming `flag` (for `pdctl plan`)."""
    try:
        return from_json(json.loads(path.read_text()))
    except OSError as exc:
        raise ProfileError(f"{flag} {path}: cannot read it: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{flag} {path}: not JSON ({exc.msg})") from None
    except ProfileError as exc:
        raise ProfileError(f"{flag} {path}: {exc}") from None


def show_report(profile: CalibratedProfile, report: dict[str, Any], console: Console) -> None:
    """The coefficients, then measured against forecast on the held-out measurements."""
    console.print(profile.describe())
    for name, value in profile.coefficients().items():
        console.print(f"  {name:<18} {value * 1e3:.6f} ms")
    table = Table(
        "timing",
        "rate",
        "requests",
        "TTFT p50 ms: measured / forecast (error)",
        "ITL p50 ms: measured / forecast (error)",
        "TTFT MAPE",
        "ITL MAPE",
        title=f"Error on {report['held_out']} (not fitted)",
    )
    for label in ("calibrated", "datasheet"):
        for row in report[label]["rates"]:
            table.add_row(
                label if label == "calibrated" else f"{report['hardware']} datasheet",
                f"{row['rate']:g}",
                str(row["requests"]),
                _p50(row["ttft_p50_ms"]),
                _p50(row["itl_p50_ms"]),
                _share(row["ttft_mape"]),
                _share(row["itl_mape"]),
            )
    console.print(table)
    console.print(offset_line(report["ttft_offset"]))
    if "warning" in report:
        console.print(f"[bold]warning:[/bold] {report['warning']}")


def offset_line(offset: dict[str, Any]) -> str:
    """The TTFT offset and, from the engine's own histograms, where it went."""
    line = f"TTFT offset {offset.get('ms', 0.0):.2f} ms ({offset['from']})"
    if "outside_engine_ms" in offset:
        phases = offset["engine_phases_ms"]
        line += (
            f": {offset['outside_engine_ms']:.2f} ms outside the engine (client mean TTFT - "
            f"vLLM's time_to_first_token mean), {offset['engine_ms']:.2f} ms the replay misses "
            f"of the engine's own; engine queue {phases['queue_s']:.2f} ms, prefill "
            f"{phases['prefill_s']:.2f} ms per request"
        )
    return line


def _p50(cell: dict[str, Any]) -> str:
    error = "-" if cell["error"] is None else f"{cell['error']:+.1%}"
    return f"{cell['measured']:.2f} / {cell['forecast']:.2f} ({error})"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _fail(message: str) -> NoReturn:
    typer.echo(f"pdctl calibrate: error: {message}", err=True)
    raise typer.Exit(2)
