"""`pdctl nodes`: the cluster's nodes from a real `pdctl serve` over HTTP, as a table or JSON;
the server from --server, PDCTL_SERVER or the config file and the token from PDCTL_TOKEN, as
every operator verb; one line naming the flag when the server cannot be reached."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.processes import Process, free_port, port_range
from terminal.verbs.nodes import table
from tests.terminal.verbs_run import pdctl


def pdctl_nodes(
    *args: str, token: str | None = None, server: str | None = None
) -> subprocess.CompletedProcess:
    return pdctl("nodes", *args, token=token, server=server, timeout=60)


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
def test_the_server_comes_from_the_environment_or_the_config_file(
    plane: Process, tmp_path: Path
) -> None:
    # Not the default port: a verb that ignored them would ask 127.0.0.1:8000.
    assert not plane.url.endswith(":8000")
    out = pdctl_nodes("--json", token="view-secret", server=plane.url)
    assert out.returncode == 0, out.stderr
    assert [n["id"] for n in json.loads(out.stdout)] == ["local"]
    config = tmp_path / "config.toml"
    config.write_text(f'server = "{plane.url}"\n')
    from_file = pdctl("nodes", "--json", token="view-secret", config=config)
    assert from_file.returncode == 0, from_file.stderr


@pytest.mark.e2e
def test_without_a_token_it_says_which_variable_to_set(plane: Process) -> None:
    out = pdctl_nodes("--server", plane.url)
    assert out.returncode == 4 and out.stdout == ""
    assert out.stderr.strip() == (
        "pdctl nodes: error: 401: a token is required: send "
        "'Authorization: Bearer <token>' or sign in at /login (set PDCTL_TOKEN)"
    )


def test_an_unreachable_server_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = pdctl_nodes("--server", url)
    assert out.returncode == 3
    assert out.stderr.startswith(f"pdctl nodes: error: --server {url}: cannot reach it (")
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    bad = pdctl_nodes("--server", "127.0.0.1:8000")
    assert bad.returncode == 2
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
