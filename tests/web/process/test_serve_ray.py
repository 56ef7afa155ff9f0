"""`pdctl serve --ray-address`: a cluster that does not answer, or an address that is not one,
is one line naming the flag, and nothing starts (no database, no run dir)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.processes import ROOT


def serve(tmp_path: Path, *flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), "serve", "--db", str(tmp_path / "p.db"), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "COLUMNS": "200",
            "PDCTL_RUNTIME_DIR": str(tmp_path / "runs"),
            **(env or {}),
        },
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def test_an_unreachable_ray_cluster_is_one_line_naming_the_flag_and_nothing_starts(tmp_path):
    port = closed_port()
    done = serve(tmp_path, "--port", "0", "--ray-address", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--ray-address" in lines[0], done.stderr
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "p.db").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:", ":6379", "127.0.0.1:port"])
def test_a_ray_address_that_is_not_host_port_is_refused_naming_the_flag(tmp_path, address):
    done = serve(tmp_path, "--port", "0", env={"PDCTL_RAY_ADDRESS": address})
    assert done.returncode == 2, done.stderr
    assert "ray_address" in done.stderr or "--ray-address" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "p.db").exists()
