"""`pdctl plan --model PATH`, `pdctl kv --model PATH` and `pdctl sim --model-profile PATH`:
a model config becomes a profile, and a config lacking a field is refused naming flag and field."""

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simulator import cli as sim_cli
from simulator.plan import cli as plan_cli

CONFIGS = Path(__file__).parents[1] / "fixtures" / "model_configs"


@pytest.fixture
def app():
    app = typer.Typer()
    plan_cli.register(app)
    sim_cli.register(app)
    return app


@pytest.fixture
def no_layers(tmp_path):
    config = json.loads((CONFIGS / "llama-3.1-8b/config.json").read_text())
    del config["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_plan_runs_a_model_from_its_config(app):
    args = ["plan", "--model", str(CONFIGS / "gpt-oss-120b"), "--hardware", "h100", "--gpus", "2"]
    args += ["--config", "2xtp1", "--rate", "2", "--num-prompts", "10", "--json"]
    out = CliRunner().invoke(app, [*args, "--input-len", "300", "--output-len", "20"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["rows"][0]["rate"] == 2.0


def test_kv_of_a_model_from_its_config(app):
    out = CliRunner().invoke(app, ["kv", "--model", str(CONFIGS / "deepseek-v3"), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["kv_bytes_per_token"] == 70_272


@pytest.mark.parametrize(
    ("verb", "flag"), [("plan", "--model"), ("kv", "--model"), ("sim", "--model-profile")]
)
def test_a_config_missing_a_field_is_refused_naming_flag_and_field(app, no_layers, verb, flag):
    out = CliRunner().invoke(app, [verb, flag, no_layers])
    assert out.exit_code == 2, out.output
    assert f"{flag} {no_layers}: config lacks 'num_hidden_layers'" in out.output
    assert "Traceback" not in out.output


def test_sim_takes_a_config_path_for_its_profile(app):
    # A later flag error proves the profile was accepted without starting a server.
    for flag in ("--model-profile", "--model"):
        out = CliRunner().invoke(app, ["sim", flag, str(CONFIGS / "tiny"), "--time-scale", "0"])
        assert out.exit_code == 2 and "--time-scale must be > 0" in out.output, out.output
