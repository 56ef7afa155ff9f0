"""One behaviour per verb, against a real `pdctl serve` on a port that is not the default:
every verb that talks with a control plane finds it through PDCTL_SERVER (and the config
file); one pointed at something that is not pdctl serve exits 3 saying so; a follower (events,
logs) rides out a restart of the server and goes on printing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
import typer.main

import pdctl as pdctl_app
from harness.control_plane import ControlPlane
from harness.stack import wait_until
from tests.terminal.verbs_run import MORIIO_YAML, Follower, pdctl

pytestmark = pytest.mark.e2e

NAME = "onev"
# Each verb that asks a control plane, with arguments that change nothing, and the exit code
# it gives when it reached this one.
VERBS: dict[str, tuple[list[str], int]] = {
    "pdctl ls": ([], 0),
    "pdctl show": ([NAME], 0),
    "pdctl history": ([NAME], 0),
    "pdctl diff": ([NAME, "1", "1"], 0),
    "pdctl apply": (["-f", "SPEC", "--dry-run"], 0),
    "pdctl start": ([NAME, "--no-wait"], 0),
    "pdctl stop": (["nosuch"], 1),
    "pdctl restart": ([NAME, "--instance", "decode-9"], 1),
    "pdctl switch": ([NAME, "--mode", "read", "--reason", "t"], 5),
    "pdctl move": ([NAME, "decode-9", "--role", "prefill", "--reason", "t"], 1),
    "pdctl pause": (["nosuch"], 1),
    "pdctl release": (["nosuch"], 1),
    "pdctl drain": (["nosuch", "decode-0"], 1),
    "pdctl undrain": (["nosuch", "decode-0"], 1),
    "pdctl events": ([NAME], 0),
    "pdctl logs": ([NAME, "proxy", "--lines", "2"], 0),
    "pdctl advise": ([NAME], 0),
    "pdctl nodes": ([], 0),
    "pdctl top": ([NAME, "--once"], 0),
    "pdctl bench": (
        ["--deployment", NAME, "--num-prompts", "2", "--input-len", "8", "--output-len", "2"],
        0,
    ),
    # no traffic through its proxy yet: the fit refuses, naming what it lacks
    "pdctl calibrate": (["--deployment", NAME], 1),
    "pdctl rollout status": ([NAME, "--once"], 0),
    "pdctl rollout abort": ([NAME], 5),
    "pdctl rollout undo": ([NAME, "--to-revision", "9"], 1),
    "pdctl rollout history": ([NAME], 0),
    # an address the API refuses, by its flag: nothing is attached
    "pdctl attach": (["ext", "--prefill", "ftp://x", "--decode", "http://127.0.0.1:9"], 2),
}


def server_verbs() -> set[str]:
    """Every verb with a --server flag, from the CLI's own parser."""
    app = typer.Typer()
    pdctl_app._register(app)

    def walk(group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, list]]:
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                yield from walk(command, (*path, name))
            else:
                yield " ".join(("pdctl", *path, name)), command.params

    return {
        verb
        for verb, params in walk(typer.main.get_command(app))
        if any("--server" in p.opts for p in params)
    }


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    tmp = tmp_path_factory.mktemp("every-verb")
    plane = ControlPlane(tmp).start()
    spec = tmp / "spec.yaml"
    spec.write_text(MORIIO_YAML.format(name=NAME))
    try:
        url = plane.server.url
        assert pdctl("apply", "-f", str(spec), token=None, server=url).returncode == 0
        started = pdctl("start", NAME, "--timeout", "90", token=None, server=url)
        assert started.returncode == 0, started.stderr
        yield plane
    finally:
        pdctl("stop", NAME, "--timeout", "30", token=None, server=plane.server.url)
        plane.close()


def test_the_table_names_every_verb_that_asks_a_control_plane() -> None:
    assert server_verbs() == set(VERBS)


def test_every_verb_finds_the_server_through_the_environment(plane, tmp_path) -> None:
    url = plane.server.url
    assert not url.endswith(":8000")  # a verb that ignored PDCTL_SERVER would ask :8000
    spec = tmp_path / "spec.yaml"
    spec.write_text(MORIIO_YAML.format(name=NAME))
    for verb, (args, code) in VERBS.items():
        argv = [a.replace("SPEC", str(spec)) for a in args]
        out = pdctl(*verb.split()[1:], *argv, token=None, server=url)
        assert ":8000" not in out.stderr, (verb, out.stderr)
        assert out.returncode == code, (verb, out.stderr)


def test_the_config_file_names_the_server_too(plane, tmp_path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'server = "{plane.server.url}"\n')
    for verb in (["nodes"], ["ls"], ["events", NAME]):
        out = pdctl(*verb, token=None, config=config)
        assert out.returncode == 0, (verb, out.stderr)


class NotOurs(BaseHTTPRequestHandler):
    """What a deployment's proxy (or any other FastAPI app) says of pdctl's routes."""

    def do_GET(self) -> None:
        body = json.dumps({"detail": "Not Found"}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stranger() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotOurs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_is_not_pdctl_serve_exits_3_saying_so(stranger) -> None:
    for verb in (["ls"], ["show", NAME], ["nodes"], ["events", NAME, "-f", "--timeout", "2"]):
        out = pdctl(*verb, token=None, server=stranger, timeout=60)
        assert out.returncode == 3, (verb, out.stderr)
        assert out.stderr.strip().endswith("(not pdctl serve?)"), out.stderr
        assert f"--server {stranger}: answered 404 Not Found for /api/" in out.stderr


def test_followers_ride_out_a_restart_of_the_server(plane, tmp_path: Path) -> None:
    url = plane.server.url
    events = Follower("events", NAME, "--follow", "--timeout", "120", server=url, token=None)
    logs = Follower("logs", NAME, "proxy", "--follow", "--timeout", "120", server=url, token=None)
    try:
        events.wait_for("deployment.start", timeout=30)
        logs.wait_for("", timeout=30)  # its first read done: only then is there a tail to follow
        plane.server.stop()
        plane.start()  # the same port and database; the instances ran on
        spec = tmp_path / "spec.yaml"
        spec.write_text(MORIIO_YAML.format(name=NAME).replace("60}", "45}"))
        wait_until(lambda: events.proc.poll() is None, 5, "events still following")
        applied = pdctl("apply", "-f", str(spec), "--no-rollout", token=None, server=url)
        assert applied.returncode == 0, applied.stderr
        events.wait_for("deployment.updated", timeout=60)  # recorded after the restart
        assert events.proc.poll() is None and logs.proc.poll() is None
        said = {}
        for name, follower in (("events", events), ("logs", logs)):
            follower.proc.kill()
            _, said[name] = follower.proc.communicate(timeout=10)
    finally:
        events.close()
        logs.close()
    assert "retrying in" in said["events"] and "pdctl events: reconnected" in said["events"]
    assert "Traceback" not in said["events"] + said["logs"]


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["show", "onve"], 1, "404: no deployment named 'onve' (did you mean 'onev'?)"),
        (["top", "onve", "--once"], 1, "no deployment named 'onve' (did you mean 'onev'?)"),
        (["rollout", "undo", "onve"], 1, "no deployment named 'onve' (did you mean 'onev'?)"),
        (["logs", NAME, "decod-0"], 1, "(did you mean 'decode-0'?)"),
        (["restart", NAME, "--instance", "decod-0"], 1, "(did you mean 'decode-0'?)"),
        (["restart", NAME, "--strategy", "rol"], 2, "one of roll, hold, recreate (did you mean"),
        (["advise", NAME, "--apply", "light_trafic"], 2, "unknown rule (did you mean "),
    ],
)  # fmt: skip
def test_a_mistyped_name_gets_did_you_mean(plane, args, code, said) -> None:
    out = pdctl(*args, token=None, server=plane.server.url)
    assert out.returncode == code, out.stderr
    assert said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
