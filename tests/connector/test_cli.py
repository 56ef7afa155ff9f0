"""`pdctl proxy`, its options generated from ProxySettings: every flag it had, refusals that
exit 2 naming the flag, the environment's variables, the generated admin token."""

import json

import pytest
import typer
from typer.testing import CliRunner

import connector.server
from connector import cli
from connector.settings import ProxySettings

# `pdctl proxy`'s flags before its options were generated from the model (commit f24504f).
SHOWN = [
    "--port", "--host", "--connector", "--mode", "--prefill", "--decode", "--instance",
    "--encode", "--render", "--registry-port", "--slo-ttft-ms", "--slo-itl-ms", "--slo-tpot-ms",
    "--itl-slo-stat", "--policy", "--ttft-parts", "--no-ttft-parts", "--bidirectional-kv",
    "--no-bidirectional-kv", "--kv-blocks-ttl", "--bidir-max-conversations", "--admin-token",
    "--admin-token-file", "--registry-allow", "--registry-max-pending", "--prefill-timeout",
    "--decode-timeout", "--hold-queue", "--hold-deadline", "--eject-after", "--eject-seconds",
    "--eject-max-share", "--first-byte-timeout", "--retry-attempts", "--retry-deadline",
    "--retry-budget-ratio", "--retry-min-per-s", "--retry-backoff", "--startup-grace",
    "--max-body-bytes", "--header-timeout", "--body-timeout", "--registry-max-instances",
    "--health-timeout",
]  # fmt: skip
HIDDEN = ["--registry-expected", "--heartbeat-scale", "--health-interval"]
REPEATED = ["--prefill", "--decode", "--instance", "--encode", "--render", "--registry-allow"]


@pytest.fixture
def served(monkeypatch, tmp_path) -> list[ProxySettings]:
    """What `pdctl proxy` would serve; its token file in tmp_path unless a test says."""
    got: list[ProxySettings] = []
    monkeypatch.setattr(connector.server, "serve", got.append)
    monkeypatch.setenv("PDCTL_RUNTIME_DIR", str(tmp_path))
    for name in ("PDCTL_ADMIN_TOKEN", "PDCTL_REGISTRY_EXPECTED"):
        monkeypatch.delenv(name, raising=False)
    return got


def invoke(*args: str, env: dict[str, str] | None = None):
    app = typer.Typer()
    cli.register(app)
    app.command("other")(lambda: None)  # two commands: `proxy` is named, as under pdctl
    return CliRunner().invoke(app, ["proxy", *args], env=env, terminal_width=200)


def command_flags() -> tuple[list[str], list[str]]:
    app = typer.Typer()
    cli.register(app)
    params = typer.main.get_command(app).params
    shown = [o for p in params if not p.hidden for o in (*p.opts, *p.secondary_opts)]
    hidden = [o for p in params if p.hidden for o in (*p.opts, *p.secondary_opts)]
    return shown, hidden


def test_every_flag_of_before_is_still_there_and_shown_as_before():
    shown, hidden = command_flags()
    assert set(SHOWN) <= set(shown) and set(HIDDEN) <= set(hidden)
    help_text = invoke("--help").output
    assert all(flag in help_text for flag in ("--slo-ttft-ms", "--retry-min-per-s"))
    assert not any(flag in help_text for flag in HIDDEN)


def test_every_flag_parses_into_its_field(served):
    expected = json.dumps([{"url": "http://127.0.0.1:9", "role": "decode", "modes": ["read"]}])
    result = invoke(
        *("--port", "7", "--host", "0.0.0.0", "--connector", "nixl", "--mode", "read"),
        *("--prefill", "http://p1", "--prefill", "http://p2#host:h", "--decode", "http://d"),
        *("--encode", "http://e", "--render", "http://r", "--registry-port", "-1"),
        *("--slo-ttft-ms", "900", "--slo-itl-ms", "40", "--slo-tpot-ms", "30"),
        *("--itl-slo-stat", "max", "--policy", "least-tokens", "--no-ttft-parts"),
        *("--bidirectional-kv", "--kv-blocks-ttl", "60", "--bidir-max-conversations", "5"),
        *("--admin-token", "t0k", "--registry-allow", "10.0.0.0/8", "--registry-allow", "::1"),
        *("--registry-expected", expected, "--registry-max-pending", "2"),
        *("--prefill-timeout", "11", "--decode-timeout", "12", "--hold-queue", "3"),
        *("--hold-deadline", "4", "--eject-after", "5", "--eject-seconds", "6"),
        *("--eject-max-share", "0.7", "--first-byte-timeout", "8", "--retry-attempts", "9"),
        *("--retry-deadline", "10", "--retry-budget-ratio", "0.3", "--retry-min-per-s", "1"),
        *("--retry-backoff", "0.1", "--startup-grace", "2", "--max-body-bytes", "4096"),
        *("--header-timeout", "3", "--body-timeout", "4", "--registry-max-instances", "7"),
        *("--heartbeat-scale", "0.5", "--health-timeout", "1.5", "--health-interval", "0"),
    )
    assert result.exit_code == 0, result.output
    [s] = served
    assert (s.port, s.host, s.registry_port, s.health_interval) == (7, "0.0.0.0", None, None)
    assert [f.text for f in s.prefill] == ["http://p1", "http://p2#host:h"]
    assert [f.url for f in (*s.decode, *s.encode, *s.render)] == [
        "http://d",
        "http://e",
        "http://r",
    ]
    assert (s.slo_ttft_ms, s.slo_itl_ms, s.slo_tpot_ms, s.itl_slo_stat) == (900, 40, 30, "max")
    assert (s.policy, s.ttft_parts, s.bidirectional_kv, s.kv_blocks_ttl) == (
        "least-tokens", False, True, 60
    )  # fmt: skip
    assert s.admin_token == "t0k" and s.registry_allow == ("10.0.0.0/8", "::1")
    assert [e.url for e in s.registry_expected or ()] == ["http://127.0.0.1:9"]
    assert s.retry.attempts == 9 and s.retry.backoff_s == 0.1 and s.eject_max_share == 0.7
    assert (s.max_body_bytes, s.registry_max_instances, s.heartbeat_scale) == (4096, 7, 0.5)


def test_defaults_are_the_models(served, tmp_path):
    assert invoke("--port", "7", "--admin-token", "t").exit_code == 0
    assert served[0] == ProxySettings(port=7, admin_token="t", runtime_dir=tmp_path)


@pytest.mark.parametrize(
    ("args", "flag", "phrase"),
    [
        (["--mode", "write"], "--mode", "NIXL has no write mode"),
        (["--connector", "mooncake"], "--connector", "unknown connector"),
        (["--policy", "random"], "--policy", "unknown policy"),
        (["--prefill", "h:1"], "--prefill", "must start with http://"),
        (["--prefill", "http://a", "--decode", "http://a"], "--decode", "may appear once"),
        (["--mode", "colocated", "--prefill", "http://a"], "--prefill", "mode colocated"),
        (["--instance", "http://a"], "--instance", "mode colocated"),
        (["--slo-ttft-ms", "-1"], "--slo-ttft-ms", "greater than 0"),
        (["--slo-itl-ms", "inf"], "--slo-itl-ms", "finite"),
        (["--itl-slo-stat", "median"], "--itl-slo-stat", "'mean', 'p99' or 'max'"),
        (["--hold-queue", "-1"], "--hold-queue", "greater than or equal to 0"),
        (["--retry-attempts", "11"], "--retry-attempts", "less than or equal to 10"),
        (["--max-body-bytes", "10"], "--max-body-bytes", "1024"),
        (["--connector", "moriio", "--bidirectional-kv"], "--bidirectional-kv", "NIXL's"),
        (["--registry-allow", "nope"], "--registry-allow", "is not an address"),
        (["--registry-expected", "[{"], "--registry-expected (PDCTL_REGISTRY_EXPECTED)", ""),
        (["--port", "x"], "'--port'", "valid integer"),  # typer's own parsing
    ],
)
def test_a_bad_value_exits_2_naming_its_flag(served, args, flag, phrase):
    result = invoke("--port", "7", *args)
    assert result.exit_code == 2
    text = " ".join(result.output.replace("│", " ").split())
    assert f"Invalid value for {flag}: " in text and phrase in text, text
    assert served == []


def test_the_environment_gives_the_token_and_the_expected_registrations(served):
    expected = json.dumps([{"url": "http://127.0.0.1:9", "role": "prefill", "modes": ["read"]}])
    env = {"PDCTL_ADMIN_TOKEN": "from-env", "PDCTL_REGISTRY_EXPECTED": expected}
    assert invoke("--port", "7", "--connector", "moriio", env=env).exit_code == 0
    assert invoke("--port", "7", "--admin-token", "flag", env=env).exit_code == 0
    assert [s.admin_token for s in served] == ["from-env", "flag"]
    assert [e.url for e in served[0].registry_expected or ()] == ["http://127.0.0.1:9"]
    bad = invoke("--port", "7", env={"PDCTL_REGISTRY_EXPECTED": "[1]"})
    assert bad.exit_code == 2 and "PDCTL_REGISTRY_EXPECTED" in bad.output


def test_without_a_token_one_is_generated_into_the_runtime_dir(served, tmp_path):
    result = invoke("--port", "7")
    assert result.exit_code == 0, result.output
    path = tmp_path / "proxy-7.admin-token"
    assert served[0].admin_token == path.read_text().strip()
    assert str(path) in result.output
    own = tmp_path / "own" / "token"
    assert invoke("--port", "7", "--admin-token-file", str(own)).exit_code == 0
    assert served[1].admin_token == own.read_text().strip()


def test_an_unwritable_token_file_exits_2_naming_its_flag(served, tmp_path):
    (tmp_path / "file").write_text("")
    result = invoke("--port", "7", "--admin-token-file", str(tmp_path / "file" / "token"))
    assert result.exit_code == 2 and "--admin-token-file" in result.output
    assert served == []
