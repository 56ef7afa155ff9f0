"""`pdctl bench` from the command line: errors name the flag, results land in the JSON."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.cli import register
from tests.bench.sse_server import FakeEngine, serving_in_thread

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--num-prompts", "4", "--input-len", "8", "--output-len", "3", "--timeout", "10"]


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Keep `bench` a subcommand, as it is under pdctl."""

    register(app)
    return app


def _invoke(*args: str):
    return CliRunner().invoke(_app(), ["bench", *args])


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--request-rate", "-1"], "--request-rate"),
        (["--request-rate", "fast"], "--request-rate"),
        (["--range-ratio", "1"], "--range-ratio"),
        (["--itl-slo-stat", "p50"], "--itl-slo-stat"),
        (["--endpoint", "embeddings"], "--endpoint"),
        (["--dataset", "sharegpt"], "--dataset"),
        (["--num-prompts", "0"], "--num-prompts"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--slo-itl-ms", "-5"], "--slo-itl-ms"),
        (["--goodput-share", "2"], "--goodput-share"),
        (["--arrivals", "poisson"], "--arrivals"),
        (["--arrivals", "vllm", "--seed", "-1"], "--seed"),
        (["--workers", "0"], "--workers"),
        (["--workers", "4", "--max-concurrency", "2"], "--max-concurrency"),
    ],
)
def test_bad_flag_is_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    result = _invoke("--base-url", "http://127.0.0.1:9", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: invalid value for " + flag)
    assert "Traceback" not in result.output


def test_bad_base_url_names_the_flag() -> None:
    result = _invoke("--base-url", "localhost:8000")
    assert result.exit_code == 2
    assert "--base-url" in result.stderr


def test_result_json_in_a_missing_directory_fails_before_the_run(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "result.json"
    result = _invoke("--base-url", "http://127.0.0.1:9", "--result-json", str(missing))
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --result-json: directory")


def test_unreachable_server_is_one_line_not_a_traceback() -> None:
    result = _invoke("--base-url", "http://127.0.0.1:9", "--timeout", "2")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: --base-url: cannot reach http://127.0.0.1:9/v1/models")


def test_single_rate_writes_vllm_style_json(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with serving_in_thread(FakeEngine()) as url:
        result = _invoke(
            "--base-url",
            url,
            *SMALL,
            "--slo-ttft-ms",
            "2000",
            "--slo-itl-ms",
            "1000",
            "--itl-slo-stat",
            "max",
            "--result-json",
            str(out),
            "--save-requests",
        )
    assert result.exit_code == 0, result.output
    assert "SLO attainment" in result.stdout
    document = json.loads(out.read_text())
    assert document["completed"] == 4 and document["failed"] == 0
    assert document["request_rate"] == "inf"
    assert document["slo_attainment"] == 1.0
    assert document["itl_slo_stat"] == "max"
    assert document["max_goodput_rate"] == "inf"
    assert len(document["requests"]) == 4
    for name in ("request_goodput", "output_throughput", "p99_itl_ms", "median_e2el_ms"):
        assert name in document


def test_sweep_prints_rates_and_max_goodput_rate(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    with serving_in_thread(FakeEngine()) as url:
        result = _invoke(
            "--base-url",
            url,
            *SMALL,
            "--request-rate",
            "100,inf",
            "--endpoint",
            "chat",
            "--slo-ttft-ms",
            "2000",
            "--slo-itl-ms",
            "1000",
            "--result-json",
            str(out),
        )
    assert result.exit_code == 0, result.output
    assert "max_goodput_rate inf req/s" in result.stdout
    document = json.loads(out.read_text())
    assert [run["request_rate"] for run in document["runs"]] == [100.0, "inf"]
    assert document["max_goodput_rate"] == "inf"
    assert "requests" not in document["runs"][0]
    assert "partial" not in document  # the whole sweep replaced the rates kept on the way
    assert not out.with_name("sweep.json.tmp").exists()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["kill", "ctrl-c"])
def test_a_sweep_killed_part_way_leaves_the_rates_it_measured(tmp_path: Path, signum) -> None:
    """A real `pdctl bench` process, killed or interrupted during its second rate (0.5 req/s:
    its four arrivals take ~18 s): --result-json holds the first rate whole, marked partial;
    interrupted, it says where they are."""
    out = tmp_path / "result.json"
    argv = [
        sys.executable,
        str(ROOT / "pdctl.py"),
        "bench",
        *SMALL,
        "--quiet",
        "--request-rate",
        "200,0.5",
        "--slo-ttft-ms",
        "2000",
        "--result-json",
        str(out),
    ]
    with serving_in_thread(FakeEngine()) as url:
        proc = subprocess.Popen(
            [*argv, "--base-url", url], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 30
            while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            proc.send_signal(signum)
            _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    if signum == signal.SIGINT:
        assert proc.returncode == 130
        assert f"interrupted; the 1 rate(s) measured are in --result-json {out}" in err.decode()
    document = json.loads(out.read_text())
    assert document["partial"] == {"rates_done": 1, "rates": 2}
    [first] = document["runs"]
    assert (first["request_rate"], first["completed"], first["slo_attainment"]) == (200.0, 4, 1.0)
    assert document["max_goodput_rate"] == 200.0


def test_failed_requests_are_reported_not_fatal() -> None:
    with serving_in_thread(FakeEngine()) as url:
        result = _invoke("--base-url", url, *SMALL, "--model", "http-500")
    assert result.exit_code == 0, result.output
    assert "Failed requests" in result.stdout


def test_pdctl_has_the_bench_verb_and_its_errors_have_no_traceback() -> None:
    pdctl = [sys.executable, str(ROOT / "pdctl.py"), "bench"]
    helped = subprocess.run([*pdctl, "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0
    assert "--slo-itl-ms" in helped.stdout
    failed = subprocess.run(
        [*pdctl, "--base-url", "http://127.0.0.1:9", "--range-ratio", "1.5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert failed.returncode == 2
    assert "--range-ratio" in failed.stderr
    assert "Traceback" not in failed.stderr
