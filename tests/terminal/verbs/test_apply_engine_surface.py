"""`pdctl apply` of a spec the engine allowlist refuses (issue 39: code through the env, a
host path, a listener on every interface): one line per refused field, naming it and why,
against a real `pdctl serve`; nothing stored."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from harness.control_plane import ControlPlane
from tests.terminal.verbs_run import TOKENS, pdctl

pytestmark = pytest.mark.e2e

SPEC = """\
name: probe
engine: vllm
model: tiny
topology: disaggregated
connector: NixlConnector
env: {VLLM_LOGGING_STREAM: "ext://evil_module"}
extra_args: ["--download-dir", "/etc"]
groups:
  - {name: prefill, role: prefill}
  - name: decode
    role: decode
    env: {UCX_HANDLE_ERRORS: debug, UCX_GDB_COMMAND: /tmp/evil.sh,
          VLLM_NIXL_SIDE_CHANNEL_HOST: 0.0.0.0}
"""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("surface"), env=TOKENS).start()
    try:
        yield plane
    finally:
        plane.close()


def test_apply_names_each_refused_engine_entry_and_why(plane, tmp_path) -> None:
    spec = tmp_path / "probe.yaml"
    spec.write_text(SPEC)
    out = pdctl("apply", "-f", str(spec), server=plane.server.url)
    assert out.returncode == 2 and out.stdout == "", out  # a spec the API refuses
    lines = out.stderr.splitlines()
    prefix = f"pdctl apply: error: {spec}: "
    assert all(line.startswith(prefix) for line in lines), lines
    said = {line[len(prefix) :].split(": ", 1)[0]: line for line in lines}
    assert set(said) == {
        "env.VLLM_LOGGING_STREAM",
        "extra_args.1",
        "groups.1.env.UCX_HANDLE_ERRORS",
        "groups.1.env.UCX_GDB_COMMAND",
        "groups.1.env.VLLM_NIXL_SIDE_CHANNEL_HOST",
    }
    assert "a program UCX runs on a crash signal" in said["groups.1.env.UCX_GDB_COMMAND"]
    assert "ext://sys.stderr, ext://sys.stdout" in said["env.VLLM_LOGGING_STREAM"]
    assert "'/etc' is not under the operator's roots" in said["extra_args.1"]
    assert "every interface" in said["groups.1.env.VLLM_NIXL_SIDE_CHANNEL_HOST"]
    listed = json.loads(pdctl("ls", "--json", server=plane.server.url).stdout)
    assert [d["name"] for d in listed] == []
