"""The token rules of the operator verbs against a real `pdctl serve` with operator and viewer
tokens: none is exit 4 naming PDCTL_TOKEN; a viewer reads (ls, show, history, events) but
cannot change anything (apply, start, switch: exit 4); an operator can; the token comes from
PDCTL_TOKEN or a config file only its owner can read (0644 is refused, exit 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.control_plane import ControlPlane
from harness.processes import free_port
from tests.terminal.verbs_run import MORIIO_YAML, OPERATOR_SECRET, TOKENS, VIEWER_SECRET, pdctl

pytestmark = pytest.mark.e2e
SPEC = "tok"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    tmp = tmp_path_factory.mktemp("verbs-tokens")
    plane = ControlPlane(tmp, env=TOKENS).start()
    try:
        (tmp / "tok.yaml").write_text(MORIIO_YAML.format(name=SPEC))
        assert pdctl("apply", "-f", str(tmp / "tok.yaml"), server=plane.proc.url).returncode == 0
        yield plane
    finally:
        plane.close()


def test_without_a_token_every_verb_says_which_variable_to_set(plane) -> None:
    for args in (("ls",), ("show", SPEC), ("events", SPEC, "--follow", "--timeout", "5")):
        out = pdctl(*args, token=None, server=plane.proc.url)
        assert out.returncode == 4, args
        assert out.stderr.strip() == (
            f"pdctl {args[0]}: error: 401: a token is required: send 'Authorization: Bearer "
            "<token>' or sign in at /login (set PDCTL_TOKEN)"
        )


def test_a_viewer_reads_but_cannot_change(plane, tmp_path) -> None:
    url = plane.proc.url
    for args in (("ls",), ("show", SPEC), ("history", SPEC), ("events", SPEC)):
        assert pdctl(*args, token=VIEWER_SECRET, server=url).returncode == 0, args
    spec = tmp_path / "tok.yaml"
    spec.write_text(MORIIO_YAML.format(name=SPEC).replace("60}", "30}"))
    for args in (
        ("apply", "-f", str(spec)),
        ("start", SPEC),
        ("switch", SPEC, "--mode", "write", "--strategy", "hold", "--reason", "x"),
    ):
        out = pdctl(*args, token=VIEWER_SECRET, server=url)
        assert out.returncode == 4, (args, out.stderr)
        assert out.stderr.strip() == (
            f"pdctl {args[0]}: error: 403: viewer:bob may only read; changes need an operator token"
        )
    dry = pdctl("apply", "-f", str(spec), "--dry-run", token=OPERATOR_SECRET, server=url)
    assert dry.returncode == 0 and "~ proxy.hold_deadline_s: 60.0 -> 30.0" in dry.stdout


def test_the_token_from_a_config_file_only_its_owner_can_read(plane, tmp_path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'server = "{plane.proc.url}"\ntoken = "{OPERATOR_SECRET}"\n')
    config.chmod(0o600)
    out = pdctl("ls", token=None, config=config)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split()[:3] == [SPEC, "1", "pending"]  # never started
    config.chmod(0o644)
    refused = pdctl("ls", token=None, config=config)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"pdctl ls: error: config file {config} holds a token but others may read it "
        f"(mode 0644); chmod 600 {config}"
    )


def test_a_server_that_is_not_there_or_not_a_url_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = pdctl("show", SPEC, server=url)
    assert out.returncode == 3
    assert out.stderr.startswith(f"pdctl show: error: --server {url}: cannot reach it (")
    assert len(out.stderr.splitlines()) == 1
    bad = pdctl("ls", "--server", "127.0.0.1:8000")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "pdctl ls: error: --server '127.0.0.1:8000' is not an http:// or https:// URL"
    )
