"""`pdctl bench --progress-file`: one whole JSON object at every read, counting requests over
every rate of a sweep, throttled but never behind at the end of a rate."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bench.progress import MIN_INTERVAL_S, ProgressFile
from bench.records import RequestRecord
from tests.bench.sse_server import FakeEngine, serving_in_thread
from tests.bench.test_cli import SMALL, _app


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_counts_over_rates_and_writes_each_rate_end(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "progress.json"
    progress = ProgressFile(path, (2.0, 4.0), 3, clock=lambda: now[0])
    assert read(path) == {
        "done": 0,
        "failed": 0,
        "total": 6,
        "rate": 2.0,
        "rate_index": 0,
        "rates": 2,
    }
    progress.on_request(RequestRecord(ok=True))
    assert read(path)["done"] == 0  # throttled: the opening write was just now
    now[0] += MIN_INTERVAL_S
    progress.on_request(RequestRecord(ok=False))
    assert read(path)["done"] == 2
    progress.on_request(RequestRecord(ok=True))
    assert read(path) == {
        "done": 3,
        "failed": 1,
        "total": 6,
        "rate": 2.0,
        "rate_index": 0,
        "rates": 2,
    }  # the rate's last request: written at once
    now[0] += MIN_INTERVAL_S
    progress.on_request(RequestRecord(ok=True))
    assert (read(path)["done"], read(path)["rate"], read(path)["rate_index"]) == (4, 4.0, 1)
    assert not (tmp_path / "progress.json.tmp").exists()


def test_the_cli_keeps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    with serving_in_thread(FakeEngine()) as url:
        result = CliRunner().invoke(
            _app(),
            [
                "bench",
                "--base-url",
                url,
                *SMALL,
                "--request-rate",
                "200,400",
                "--progress-file",
                str(path),
            ],
        )
    assert result.exit_code == 0, result.output
    assert read(path) == {
        "done": 8,
        "failed": 0,
        "total": 8,
        "rate": 400.0,
        "rate_index": 1,
        "rates": 2,
    }


def test_a_progress_file_in_a_missing_directory_fails_before_the_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        _app(),
        [
            "bench",
            "--base-url",
            "http://127.0.0.1:9",
            "--progress-file",
            str(tmp_path / "no" / "p.json"),
        ],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: --progress-file: directory")
