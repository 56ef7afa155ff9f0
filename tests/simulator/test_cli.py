"""`pdctl sim` refuses bad flags with one line naming the flag, before binding anything."""

import pytest
import typer
from typer.testing import CliRunner

from simulator import cli


@pytest.fixture
def app():
    app = typer.Typer()
    cli.register(app)
    app.command("noop")(lambda: None)  # keep "sim" a subcommand
    return app


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["--bogus-flag"], {}, "--bogus-flag"),
        (["--kv-transfer-config", "{nope"], {}, "--kv-transfer-config is not valid JSON"),
        (["--kv-transfer-config", '{"kv_connector":"Nope"}'], {}, "unknown kv_connector"),
        (
            ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"boss"}'],
            {},
            "kv_role",
        ),
        (
            [
                "--kv-transfer-config",
                '{"kv_connector":"MoRIIOConnector","kv_connector_extra_config":{"http_port":"1"}}',
            ],
            {},
            "http_port must equal --port",
        ),
        (
            ["--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
            {"VLLM_NIXL_SIDE_CHANNEL_PORT": "99999"},
            "VLLM_NIXL_SIDE_CHANNEL_PORT",
        ),
        (
            ["--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
            {"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.2:5600"},
            "VLLM_NIXL_SIDE_CHANNEL_HOST must be an IP address or a host name",
        ),
        (
            [
                "--kv-transfer-config",
                '{"kv_connector":"MoRIIOConnector",'
                '"kv_connector_extra_config":{"host_ip":"http://10.0.0.2"}}',
            ],
            {},
            "kv_connector_extra_config.host_ip must be an IP address or a host name",
        ),
        (["--model", "gpt-5"], {}, "--model 'gpt-5' has no stand-in profile"),
        (["--model-profile", "gpt-5"], {}, "unknown models profile"),
        (["--hardware", "tpu"], {}, "unknown hardware profile"),
        (["--model-profile", "llama-3.1-70b", "--hardware", "h100"], {}, "does not fit"),
        (["--time-scale", "0"], {}, "--time-scale"),
        (["-tp", "0"], {}, "--tensor-parallel-size"),
        (["--max-model-len", "999999"], {}, "--max-model-len"),
        (
            ["--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
            {"VLLM_NIXL_ABORT_REQUEST_TIMEOUT": "soon"},
            "VLLM_NIXL_ABORT_REQUEST_TIMEOUT",
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(app, monkeypatch, args, env, needle):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, ["sim", *args])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_vllm_flags_the_stand_in_ignores_are_accepted(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "run", lambda settings: seen.setdefault("s", settings))
    app = typer.Typer()
    cli.register(app)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "Qwen/Qwen3-235B-A22B-FP8",
            "-tp",
            "4",
            "--hardware",
            "mi300x",
            "--enable-expert-parallel",
            "--distributed-executor-backend",
            "mp",
            "--max-num-batched-tokens",
            "4096",
            "--max-num-seqs",
            "64",
            "--max-model-len",
            "16384",
            "--no-enable-prefix-caching",
            "--gpu-memory-utilization",
            "0.9",
        ],
    )
    assert result.exit_code == 0, result.output
    s = seen["s"]
    assert s.model_profile == "qwen3-235b-a22b-fp8" and s.tensor_parallel_size == 4
    assert s.served_model_name == "Qwen/Qwen3-235B-A22B-FP8"
    assert s.enable_prefix_caching is False and s.max_num_seqs == 64
