"""`pdctl deploy k8s`: it writes or prints the golden render, takes images and pod networks,
and every error is one line naming the flag or the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from controller import cli
from harness.processes import ROOT

FIXTURES = Path(__file__).parents[2] / "fixtures" / "k8s"
SPECS = {"mori-blog": ROOT / "deploy" / "mori-blog.json", "nixl-2p2d": FIXTURES / "nixl-2p2d.json"}


@pytest.fixture
def run():
    app = typer.Typer()
    cli.register(app)

    def invoke(*args: str):
        return CliRunner().invoke(app, ["deploy", "k8s", *args])

    return invoke


def test_the_cli_writes_the_golden_render(run, tmp_path):
    out = run("--spec", str(SPECS["nixl-2p2d"]), "-o", str(tmp_path / "k8s"))
    assert out.exit_code == 0, out.stderr
    assert (tmp_path / "k8s" / "nixl-2p2d.yaml").read_text() == (
        FIXTURES / "nixl-2p2d.yaml"
    ).read_text()
    printed = run("--spec", str(SPECS["mori-blog"]))
    assert printed.exit_code == 0 and printed.stdout == (FIXTURES / "mori-blog.yaml").read_text()


def test_the_cli_takes_images_and_pod_networks(run):
    out = run(
        "--spec", str(SPECS["mori-blog"]), "--image", "rocm/vllm:v1",
        "--pod-network", "10.244.0.0/16",
    )  # fmt: skip
    assert out.exit_code == 0, out.stderr
    assert 'image: "rocm/vllm:v1"' in out.stdout
    assert '"--registry-allow"\n            - "10.244.0.0/16"' in out.stdout
    assert "192.168.0.0/16" not in out.stdout


def error_line(out) -> str:
    assert out.exit_code == 2, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.output, out.stderr
    return lines[0]


def test_cli_errors_are_one_line_naming_the_field(run, tmp_path):
    data = json.loads(SPECS["nixl-2p2d"].read_text())
    data["groups"][1]["placement"]["nodes"][1] = {"node_id": "0123abcdef"}
    path = tmp_path / "ray.json"
    path.write_text(json.dumps(data))
    line = error_line(run("--spec", str(path)))
    assert line.startswith("pdctl deploy k8s: error: groups[1].placement.nodes[1].node_id: ")
    assert "Ray node id" in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--spec", "/nonexistent/spec.json"], "--spec /nonexistent/spec.json: No such file"),
        ([], "give a deployment NAME or --spec FILE"),
        (["--spec", str(SPECS["nixl-2p2d"]), "--pod-network", "ten/8"], "--pod-network 'ten/8'"),
        (["gone", "--db", "/nonexistent/pdctl.db"], "--db /nonexistent/pdctl.db: no such file"),
    ],
    ids=["missing-spec", "neither", "bad-network", "missing-db"],
)
def test_cli_flag_errors_name_the_flag(run, args, needle):
    assert needle in error_line(run(*args))


def test_cli_spec_errors_name_the_field(run, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "model": "m", "topology": "colocated", "groups": []}')
    assert "groups: " in error_line(run("--spec", str(bad)))
    bad.write_text("{not json")
    assert f"--spec {bad}: spec: Invalid JSON" in error_line(run("--spec", str(bad)))
    data = json.loads(SPECS["nixl-2p2d"].read_text())
    data["env"] = {"LD_PRELOAD": "/tmp/x.so"}
    bad.write_text(json.dumps(data))
    assert "env.LD_PRELOAD: " in error_line(run("--spec", str(bad)))


def test_the_cli_renders_a_stored_deployment_with_its_ports(run, tmp_path):
    from controller.spec.deployment import DeploymentSpec
    from services.admission import Admission
    from state import migrate
    from state.db import create_engine
    from state.store import Store

    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    store = Store(engine, Admission((20000, 29999), False, lambda port: False))
    store.create(DeploymentSpec.model_validate_json(SPECS["nixl-2p2d"].read_text()), "test")
    engine.dispose()
    out = run("nixl-2p2d", "--db", str(db))
    assert out.exit_code == 0, out.stderr
    assert "http://nixl-2p2d-decode-1.nixl-2p2d-decode:" in out.stdout
    assert "nope" in error_line(run("nope", "--db", str(db)))


def test_manifests_hold_engine_paths_to_the_operators_roots(tmp_path):
    app = typer.Typer()
    cli.register(app)
    data = json.loads(SPECS["nixl-2p2d"].read_text())
    data["extra_args"] = [*data.get("extra_args", []), "--download-dir", "/srv/weights"]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(data))
    at = len(data["extra_args"]) - 1
    args = ["deploy", "k8s", "--spec", str(spec)]
    refused = CliRunner().invoke(app, args, env={"PDCTL_ENGINE_PATH_ROOTS": ""})
    assert f"extra_args[{at}]: --download-dir: '/srv/weights' is not under" in error_line(refused)
    allowed = CliRunner().invoke(app, args, env={"PDCTL_ENGINE_PATH_ROOTS": "/srv"})
    assert allowed.exit_code == 0, allowed.stderr
