"""The closed loop of issue 38: stand-ins run one hardware profile (H100), the planner is told
another (L40S). After `pdctl calibrate` on a short bench at two rates, its forecast of TTFT and
ITL p50 at a third rate it was not fitted on is within 15% of the live stand-in, where the
datasheet's forecast is off by more. Three bounded benches on loopback, ~1-1.5 min on a busy
machine: `make test-calibrate`, not `make test`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.processes import run_pdctl, running, sim

pytestmark = [pytest.mark.e2e, pytest.mark.calibrate]

MODEL, RUNS_ON, TOLD = "llama-3.1-8b", "h100", "l40s"
SHAPE = ["--input-len", "1536", "--output-len", "64"]
FIT = [(3.0, 30, 1), (8.0, 40, 2)]  # rate, requests, seed: a seed each, so no prefix hits
CHECK = (5.0, 30, 3)
WITHIN = 0.15


def _pdctl(*args: str) -> str:
    done = run_pdctl(*args, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _bench(url: str, out: Path, rate: float, count: int, seed: int) -> dict:
    _pdctl(
        "bench", "--base-url", url, "--model", MODEL, "--request-rate", f"{rate:g}",
        "--num-prompts", str(count), "--seed", str(seed), *SHAPE,
        "--save-requests", "--result-json", str(out), "--quiet",
    )  # fmt: skip
    return json.loads(out.read_text())


def _forecast(rate: float, count: int, seed: int, *calibration: str) -> dict:
    out = _pdctl(
        "plan", "--model", MODEL, "--hardware", TOLD, "--gpus", "1", "--config", "1xtp1",
        "--rate", f"{rate:g}", "--num-prompts", str(count), "--seed", str(seed), *SHAPE,
        *calibration, "--json",
    )  # fmt: skip
    return json.loads(out)


def test_calibrated_forecast_meets_the_live_stand_in_at_an_unfitted_rate(tmp_path: Path) -> None:
    engine = sim(
        tmp_path, "h100", "--model", MODEL, "--model-profile", MODEL, "--hardware", RUNS_ON
    )
    with running(engine):
        # The unfitted rate runs between the fitted ones: a machine whose load changes over the
        # minute (other tests) then weighs on the fit as on the check.
        fitted = [tmp_path / f"fit-{rate:g}.json" for rate, _, _ in FIT]
        _bench(engine.url, tmp_path / "warm-up.json", 8.0, 10, 99)  # a fresh server's first
        _bench(engine.url, fitted[0], *FIT[0])
        live = _bench(engine.url, tmp_path / "check.json", *CHECK)
        _bench(engine.url, fitted[1], *FIT[1])
    profile = tmp_path / "calibrated.json"
    report = _pdctl(
        "calibrate", *(a for path in fitted for a in ("--bench", str(path))),
        "--model", MODEL, "--hardware", TOLD, "--out", str(profile),
    )  # fmt: skip
    print(report)
    # the bench kept the engine's own histograms, and they split the TTFT offset
    assert all("engine_phases" in json.loads(path.read_text()) for path in fitted)
    assert "outside the engine" in report
    calibrated = _forecast(*CHECK, "--calibration", str(profile))
    datasheet = _forecast(*CHECK)
    assert calibrated["calibration"][0]["calibrated"] is True
    rows = []
    for name, live_key, plan_key in (
        ("TTFT p50", "median_ttft_ms", "p50_ttft_ms"),
        ("ITL p50", "median_itl_ms", "p50_itl_ms"),
    ):
        measured = live[live_key]
        cal, raw = calibrated["rows"][0][plan_key], datasheet["rows"][0][plan_key]
        rows.append(
            (name, measured, cal, (cal - measured) / measured, raw, (raw - measured) / measured)
        )
    print(f"at {CHECK[0]:g} req/s (not fitted), stand-ins on {RUNS_ON}, planner told {TOLD}:")
    for name, measured, cal, cal_err, raw, raw_err in rows:
        print(
            f"  {name}: live {measured:.2f} ms, calibrated {cal:.2f} ms ({cal_err:+.1%}), "
            f"{TOLD} datasheet {raw:.2f} ms ({raw_err:+.1%})"
        )
    for name, _, _, cal_err, _, raw_err in rows:
        assert abs(cal_err) <= WITHIN, f"{name}: calibrated forecast off by {cal_err:+.1%}"
        assert abs(raw_err) > WITHIN, f"{name}: the datasheet was already within {WITHIN:.0%}"
