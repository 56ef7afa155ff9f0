"""`pdctl nodes`: the cluster's nodes from a real `pdctl serve` over HTTP, as a table or JSON;
the token from PDCTL_TOKEN only; one line naming the flag when the server cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import ROOT, Process, free_port, port_range
from web.nodes_cli import table


def pdctl_nodes(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PDCTL_TOKEN"}
    if token is not None:
        env["PDCTL_TOKEN"] = token
    return subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), "nodes", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    tmp = tmp_path_factory.mktemp("nodes-cli")
    port = free_port()
    proc = Process(
        ["serve", "--port", str(port), "--db", str(tmp / "pdctl.db")],
        port,
        env={
            "PDCTL_RUNTIME_DIR": str(tmp / "runs"),
            "PDCTL_PORT_RANGE": port_range(),
            "PDCTL_VIEWER_TOKENS": "bob:view-secret",
        },
        log_path=tmp / "serve.log",
    )
    try:
        yield proc.wait_healthy(30)
    finally:
        proc.stop()


@pytest.mark.e2e
def test_nodes_prints_this_host_with_the_token_from_the_environment(plane: Process) -> None:
    out = pdctl_nodes("--server", plane.url, token="view-secret")
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["NODE", "ADDRESS", "STATE", "GPUS", "FREE/TOTAL", "PROCESSES"]
    assert row.split() == ["local", "127.0.0.1", "alive,", "head", "not", "counted", "0"]
    listed = json.loads(pdctl_nodes("--server", plane.url, "--json", token="view-secret").stdout)
    assert [(n["id"], n["address"], n["gpus"]) for n in listed] == [("local", "127.0.0.1", None)]


@pytest.mark.e2e
def test_without_a_token_it_says_which_variable_to_set(plane: Process) -> None:
    out = pdctl_nodes("--server", plane.url)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == (
        f"pdctl nodes: error: {plane.url} answered 401: a token is required: send "
        "'Authorization: Bearer <token>' or sign in at /login (set PDCTL_TOKEN)"
    )


def test_an_unreachable_server_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = pdctl_nodes("--server", url)
    assert out.returncode == 1
    assert out.stderr.startswith(f"pdctl nodes: error: --server {url}: cannot reach it (")
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    bad = pdctl_nodes("--server", "127.0.0.1:8000")
    assert "--server '127.0.0.1:8000' is not an http:// or https:// URL" in bad.stderr


def test_the_table_shows_free_of_total_gpus_and_each_process_under_its_node() -> None:
    listed = [
        {
            "id": "a" * 56,
            "address": "127.0.0.2",
            "alive": True,
            "head": True,
            "gpus": 8.0,
            "gpus_free": 4.0,
            "processes": [
                {"deployment": "pd", "process": "prefill-0", "role": "prefill", "state": "RUNNING"}
            ],
        },
        {
            "id": "b" * 56,
            "address": "127.0.0.3",
            "alive": False,
            "head": False,
            "gpus": 8.0,
            "gpus_free": 8.0,
            "processes": [],
        },
    ]
    assert table(listed).splitlines() == [
        "NODE          ADDRESS    STATE        GPUS FREE/TOTAL  PROCESSES",
        "aaaaaaaaaaaa  127.0.0.2  alive, head  4/8              1",
        "    pd/prefill-0 (prefill) RUNNING",
        "bbbbbbbbbbbb  127.0.0.3  dead         8/8              0",
    ]
