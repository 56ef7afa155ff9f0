"""`pdctl calibrate` and `pdctl plan --calibration` on benches the planner made (H100 timing),
told another GPU (L40S): the fit finds the H100's steps, and every bad input names its flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator.plan import cli as plan_cli
from simulator.plan.calibration.fitting import CalibrationError, calibrate
from simulator.plan.planner import Workload
from tests.simulator.plan.calibration_bench import planned_bench

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    plan_cli.register(app)
    return app


@pytest.fixture(scope="module")
def benches(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("benches")
    paths = []
    for rate, seed in ((3.0, 1), (8.0, 2)):
        path = root / f"bench-{rate:g}.json"
        path.write_text(
            json.dumps(planned_bench(MODEL, "h100", rate, Workload(30, 1536, 64, seed=seed)))
        )
        paths.append(path)
    return paths


def _calibrate(app: typer.Typer, *args: str):
    return CliRunner().invoke(app, ["calibrate", *args])


def _bench_args(paths: list[Path]) -> list[str]:
    return [a for p in paths for a in ("--bench", str(p))]


def test_calibration_finds_the_measured_gpu_and_beats_the_datasheet(benches: list[Path]) -> None:
    runs = [json.loads(p.read_text()) for p in benches]
    result = calibrate({"runs": runs}, MODEL, "l40s")
    report = result.report
    assert report["calibrated"]["itl_mape"] < 0.01 < 0.5 < report["datasheet"]["itl_mape"]
    assert report["calibrated"]["ttft_mape"] < 0.1 < 0.5 < report["datasheet"]["ttft_mape"]
    assert result.profile.fitted_rates == (3.0, 8.0) and result.profile.tp == 1


def test_cli_writes_a_profile_the_planner_runs_on_and_says_so(
    app: typer.Typer, benches: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "cal.json"
    done = _calibrate(
        app, *_bench_args(benches), "--model", MODEL, "--hardware", "l40s", "--out", str(out)
    )
    assert done.exit_code == 0, done.output
    assert "Error on every 5th request" in done.output and "l40s datasheet" in done.output
    shape = ["--model", MODEL, "--hardware", "l40s", "--gpus", "1", "--config", "1xtp1"]
    shape += ["--rate", "5", "--num-prompts", "30", "--input-len", "1536", "--output-len", "64"]
    plain = CliRunner().invoke(app, ["plan", *shape, "--json"])
    fitted = CliRunner().invoke(app, ["plan", *shape, "--calibration", str(out), "--json"])
    itl = [json.loads(r.output)["rows"][0]["p50_itl_ms"] for r in (plain, fitted)]
    assert itl[1] < itl[0] / 2  # the H100's decode steps, not the L40S's datasheet
    entry = json.loads(fitted.output)["calibration"][0]
    assert entry["calibrated"] and "calibrated from" in entry["fitted_to"][0]
    said = CliRunner().invoke(app, ["plan", *shape, "--calibration", str(out)])
    assert "timing calibrated from" in said.output


def test_holding_out_a_rate_reports_the_error_on_it(
    app: typer.Typer, benches: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "cal.json"
    args = [*_bench_args(benches), "--model", MODEL, "--hardware", "l40s", "--out", str(out)]
    done = _calibrate(app, *args, "--hold-out-rate", "8", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["held_out"] == "the run at 8 req/s"
    assert [r["rate"] for r in report["calibrated"]["rates"]] == [8.0]


def _without_records(path: Path, tmp_path: Path) -> Path:
    doc = json.loads(path.read_text())
    del doc["requests"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    return bare


def _few(path: Path, tmp_path: Path) -> Path:
    doc = json.loads(path.read_text())
    doc["requests"] = doc["requests"][:1]
    few = tmp_path / "few.json"
    few.write_text(json.dumps(doc))
    return few


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda b, t: ["--bench", str(_without_records(b[0], t))], "--bench"),
        (lambda b, t: ["--bench", str(_few(b[0], t))], "need at least"),
        (lambda b, t: ["--bench", str(t / "missing.json")], "--bench"),
        (lambda b, t: ["--bench", str(b[0]), "--hold-out-rate", "5"], "--hold-out-rate"),
        (lambda b, t: ["--bench", str(b[0]), "--hold-out-rate", "3"], "--hold-out-rate"),
        (lambda b, t: ["--bench", str(b[0]), "--config", "1p-tp2+1d-tp1"], "--config"),
        (lambda b, t: ["--bench", str(b[0]), "--config", "2x"], "--config"),
    ],
)
def test_bad_measurements_name_the_flag(app, benches, tmp_path, change, needle) -> None:
    args = [*change(benches, tmp_path), "--model", MODEL, "--hardware", "l40s"]
    done = _calibrate(app, *args, "--out", str(tmp_path / "cal.json"))
    assert done.exit_code == 2, done.output
    assert needle in done.output and "Traceback" not in done.output


def test_a_bench_of_another_model_names_the_model_flag(app, benches, tmp_path) -> None:
    args = ["--bench", str(benches[0]), "--model", "qwen2.5-7b-instruct", "--hardware", "l40s"]
    done = _calibrate(app, *args, "--out", str(tmp_path / "cal.json"))
    assert done.exit_code == 2
    assert "--model: the run at 3.0 req/s measured model 'llama-3.1-8b'" in done.output


def test_a_bench_without_records_says_how_to_get_them(benches, tmp_path) -> None:
    doc = json.loads(_without_records(benches[0], tmp_path).read_text())
    with pytest.raises(CalibrationError, match="--save-requests") as caught:
        calibrate(doc, MODEL, "l40s")
    assert caught.value.field == "requests"


def test_plan_refuses_a_calibration_of_another_gpu_or_no_file(app, benches, tmp_path) -> None:
    out = tmp_path / "cal.json"
    _calibrate(
        app, *_bench_args(benches), "--model", MODEL, "--hardware", "l40s", "--out", str(out)
    )
    for hardware, path, needle in (
        ("h100", out, "fitted for --hardware l40s, not h100"),
        ("l40s", tmp_path / "none.json", "cannot read it"),
    ):
        done = CliRunner().invoke(
            app,
            [
                "plan",
                "--model",
                MODEL,
                "--hardware",
                hardware,
                "--gpus",
                "1",
                "--calibration",
                str(path),
            ],
        )
        assert done.exit_code == 2 and "--calibration" in done.output and needle in done.output


def test_the_engines_histograms_split_the_ttft_offset(benches: list[Path]) -> None:
    runs = [json.loads(p.read_text()) for p in benches]
    for run in runs:
        ttfts = [r["ttft"] for r in run["requests"] if r["index"] % 5 != 4]
        run["engine_phases"] = {"engine_ttft_s": sum(ttfts) / len(ttfts) - 0.004}
    offset = calibrate(runs, MODEL, "l40s").report["ttft_offset"]
    assert offset["outside_engine_ms"] == pytest.approx(4.0)
    assert offset["engine_ms"] == pytest.approx(offset["ms"] - 4.0, abs=0.002)
    plain = calibrate([json.loads(p.read_text()) for p in benches], MODEL, "l40s")
    assert "outside_engine_ms" not in plain.report["ttft_offset"]
    assert plain.report["ttft_offset"]["ms"] == pytest.approx(offset["ms"])


def test_measurements_that_disagree_are_flagged(benches: list[Path]) -> None:
    runs = [json.loads(p.read_text()) for p in benches]
    assert "warning" not in calibrate(runs, MODEL, "l40s").report
    for r in runs[0]["requests"]:
        if r["index"] % 5 == 4:  # the held-out requests stalled: a load spike
            r["ttft"] += 1.0
    report = calibrate(runs, MODEL, "l40s").report
    assert "disagree" in report["warning"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", MODEL, "--hardware", "l40s", "--out", "x.json"], "--bench is needed"),
        (["--bench", "b.json", "--hardware", "l40s", "--out", "x.json"], "--model is needed"),
        (["--bench", "b.json", "--model", MODEL, "--out", "x.json"], "--hardware is needed"),
        (["--bench", "b.json", "--model", MODEL, "--hardware", "l40s"], "--out is needed"),
        (["--deployment", "d", "--model", MODEL], "--model: --deployment fits"),
        (["--deployment", "d", "--bench", "b.json"], "--bench: --deployment fits"),
        (["--deployment", "d", "--hold-out-rate", "3"], "--hold-out-rate: --deployment"),
        (["--deployment", "d", "--out", "/nowhere/x.json"], "--out: directory /nowhere"),
    ],
)
def test_flags_that_do_not_go_together_are_named(app, args, needle) -> None:
    done = _calibrate(app, *args)
    assert done.exit_code == 2, done.output
    assert needle in done.output and "Traceback" not in done.output
