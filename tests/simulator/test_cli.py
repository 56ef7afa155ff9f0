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
        (["--start-time-scale", "-1"], {}, "--start-time-scale must be between 0 and 1000"),
        (["--start-cache", "hot"], {}, "--start-cache must be one of warm, cold"),
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
        (["--block-size", "48"], {}, "--block-size must be one of"),
        (["--max-num-seqs", "0"], {}, "--max-num-seqs"),
        (["--moriio-metrics", "some"], {}, "--moriio-metrics must be one of stats, none"),
        (["--frontend-cost", "2,3"], {}, "--frontend-cost must be BASE_MS,PROMPT_US,OUTPUT_US"),
        (
            ["--enable-per-request-metrics", "--disable-log-stats"],
            {},
            "--enable-per-request-metrics requires engine statistics logging; remove "
            "--disable-log-stats",
        ),
        (["--frontend-cost", "2,x,3"], {}, "--frontend-cost must be"),
        (["--frontend-cost", "2,-1,3"], {}, "--frontend-cost must be"),
        ([], {"PDCTL_SIM_FRONTEND_COST": "fast"}, "--frontend-cost must be"),
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


def _settings_of(monkeypatch, *args):
    seen = {}
    monkeypatch.setattr(cli, "run", lambda settings: seen.setdefault("s", settings))
    app = typer.Typer()
    cli.register(app)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["sim", *args])
    assert result.exit_code == 0, result.output
    return seen["s"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], (2048, 128, 128)),  # the tiny model plays a CPU, as vLLM's CPU build runs it
        (["-tp", "2"], (4096, 256, 128)),
        (["--model-profile", "llama-3.1-8b", "--hardware", "l40s"], (2048, 256, 16)),
        (["--model-profile", "llama-3.1-8b", "--hardware", "h100"], (8192, 1024, 16)),
        (["Qwen/Qwen3-235B-A22B-FP8", "-tp", "8", "--hardware", "mi300x"], (16384, 1024, 16)),
        (["--max-num-batched-tokens", "512", "--block-size", "16"], (512, 128, 16)),
    ],
)
def test_unset_engine_flags_take_vllms_defaults_for_the_device(monkeypatch, args, expected):
    settings = _settings_of(monkeypatch, *args)
    assert (
        settings.max_num_batched_tokens,
        settings.max_num_seqs,
        settings.block_size,
    ) == expected


def test_the_defaults_applied_are_said_with_their_rule(monkeypatch):
    settings = _settings_of(monkeypatch, "--max-num-seqs", "8")
    assert "--max-num-batched-tokens 2048 (CPU defaults x world size 1)" in (
        settings.defaults_applied
    )
    assert "--max-num-seqs" not in settings.defaults_applied  # given, so not explained
