"""A server told to take a port something else holds says which flag chose it, in one line."""

import json
import os
import socket
import subprocess
import sys

import pytest

from harness.processes import ROOT, free_port

NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})


@pytest.fixture
def held():
    """A port another socket listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen()
        yield sock.getsockname()[1]


def pdctl(args, env=None):
    return subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )  # no wrapping


@pytest.mark.parametrize(
    ("args", "env", "code", "needle"),
    [
        (
            ["sim", "--model", "tiny", "--port", "{held}"],
            {},
            1,
            "the ports come from --port {held}",
        ),
        (
            ["sim", "--model", "tiny", "--port", "{free}", "--kv-transfer-config", NIXL],
            {"VLLM_NIXL_SIDE_CHANNEL_PORT": "{held}"},
            1,
            "VLLM_NIXL_SIDE_CHANNEL_PORT {held}",
        ),
        (
            ["proxy", "--port", "{held}", "--registry-port", "-1"],
            {},
            1,
            "cannot listen on 127.0.0.1:{held} (--port)",
        ),
        (
            ["proxy", "--port", "{free}", "--registry-port", "{held}", "--connector", "moriio"],
            {},
            1,
            "cannot listen for registrations on 127.0.0.1:{held} (--registry-port)",
        ),
        (
            ["serve", "--port", "{held}", "--db", "{db}"],
            {},
            2,
            "Invalid value for --port: cannot listen on",
        ),
    ],
    ids=["sim-port", "sim-side-channel", "proxy-port", "proxy-registry-port", "serve-port"],
)
def test_a_taken_port_exits_naming_its_flag(held, tmp_path, args, env, code, needle):
    ports = {"held": held, "free": free_port(), "db": tmp_path / "pdctl.db"}
    result = pdctl(
        [a if a == NIXL else a.format(**ports) for a in args],
        {k: v.format(**ports) for k, v in env.items()},
    )
    assert result.returncode == code, result.stderr
    assert not ports["db"].exists()  # refused before anything was created
    assert needle.format(**ports) in result.stderr
    assert "in use" in result.stderr.lower()
    assert "Traceback" not in result.stderr and "Unclosed" not in result.stderr
