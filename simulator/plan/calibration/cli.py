"""`pdctl calibrate`: fit the timing model to a saved `pdctl bench` result, write the
calibrated profile, print its error on the measurements it did not fit."""

from __future__ import annotations

import json
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
        help="Fit the planner's step timing to a `pdctl bench --save-requests` result.",
    )(calibrate_verb)


def calibrate_verb(
    bench: Annotated[
        list[Path],
        typer.Option(
            "--bench",
            help="A `pdctl bench --save-requests` result JSON; repeat for runs at other rates "
            "(a different --seed each, or the server's prefix cache holds the prompts).",
        ),
    ],
    model: Annotated[str, typer.Option("--model", help="The model profile that was benched.")],
    hardware: Annotated[
        str, typer.Option("--hardware", help="The cluster's hardware, as the planner is told.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Where to write the calibrated profile.")],
    config: Annotated[
        str, typer.Option("--config", help="The layout benched (colocated, e.g. 1xtp1).")
    ] = "1xtp1",
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
