"""Secrets masked in what people are shown (previews, events), and only there: the argv and env
that run keep them."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from controller.launch.ports import allocate
from controller.launch.render import preview, render
from controller.spec.redact import (
    MASK,
    UNCHANGED,
    holds_mask,
    is_secret_name,
    redact_argv,
    redact_command,
    redact_env,
    redact_spec,
    redact_text,
    restore_secrets,
)
from tests.controller.factories import nixl_1p1d

SECRET_NAMES = [
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "VLLM_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "OPENAI_APIKEY",
    "DB_PASSWORD",
    "db_passwd",
    "api-key",
    "hf-token",
    "hftoken",
    "S3_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "ssl.keys",
    "GITHUB_PAT",
    "gitlab-pat",
]
PLAIN_NAMES = [
    "max-num-batched-tokens",
    "TOKENIZERS_PARALLELISM",
    "VLLM_CPU_KVCACHE_SPACE",
    "kv-transfer-config",
    "MY_FLAG",
    "CUDA_VISIBLE_DEVICES",
    "max-model-len",
    "PYTHONHASHSEED",
    "keyword",
    "seed",
    "COMPAT_MODE",
    "PATH",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_looking_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


def test_env_values_of_secret_names_are_masked() -> None:
    assert redact_env({"HF_TOKEN": "hf_abc", "MY_FLAG": "1"}) == {"HF_TOKEN": MASK, "MY_FLAG": "1"}


def test_flag_values_are_masked_in_both_spellings_and_nothing_else() -> None:
    argv = [
        "vllm",
        "serve",
        "m",
        "--api-key",
        "sk-1",
        "--hf-token=hf_2",
        "--max-num-batched-tokens",
        "4096",
        "--api-key",
        "-starts-with-a-dash",
        "--seed",
        "7",
    ]
    assert redact_argv(argv) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        MASK,
        f"--hf-token={MASK}",
        "--max-num-batched-tokens",
        "4096",
        "--api-key",
        MASK,
        "--seed",
        "7",
    ]


def test_a_command_line_is_masked_and_still_splits() -> None:
    line = shlex.join(["vllm", "serve", "m", "--api-key", "sk 1", "--seed", "7"])
    assert shlex.split(redact_command(line)) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        MASK,
        "--seed",
        "7",
    ]
    plain = "vllm serve m --seed 7"
    assert redact_command(plain) is plain
    assert redact_command("vllm serve 'unclosed --api-key x") == MASK


def test_a_spec_has_its_env_and_args_masked_at_every_level() -> None:
    spec = {
        "name": "pd",
        "env": {"HF_TOKEN": "hf_1", "A": "b"},
        "extra_args": ["--api-key=sk"],
        "groups": [
            {"name": "p", "env": {"DB_PASSWORD": "pw"}, "extra_args": ["--hf-token", "hf_2"]}
        ],
    }
    shown = redact_spec(spec)
    assert shown == {
        "name": "pd",
        "env": {"HF_TOKEN": MASK, "A": "b"},
        "extra_args": [f"--api-key={MASK}"],
        "groups": [{"name": "p", "env": {"DB_PASSWORD": MASK}, "extra_args": ["--hf-token", MASK]}],
    }
    assert spec["env"]["HF_TOKEN"] == "hf_1"  # the input is left alone


def test_the_preview_masks_what_runs_keeps() -> None:
    spec = nixl_1p1d(
        env={"HF_TOKEN": "hf_secret_1", "MY_FLAG": "on"},
        extra_args=["--api-key", "sk-secret-2", "--seed", "3"],
    )
    ports = allocate(spec)
    shown = preview(spec, ports)["prefill-0"]
    text = repr(shown)
    assert "hf_secret_1" not in text and "sk-secret-2" not in text
    assert shown["env"]["HF_TOKEN"] == MASK and shown["env"]["MY_FLAG"] == "on"
    assert shown["argv"][shown["argv"].index("--api-key") + 1] == MASK
    assert f"HF_TOKEN={shlex.quote(MASK)}" in shown["command_line"]
    assert shlex.split(shown["command"])[-4:] == ["--api-key", MASK, "--seed", "3"]
    launch = {la.name: la for la in render(spec, ports)}["prefill-0"]
    assert launch.env["HF_TOKEN"] == "hf_secret_1"  # what runs is untouched
    assert launch.argv[launch.argv.index("--api-key") + 1] == "sk-secret-2"


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("HF_TOKEN=hf_abc123 loaded", "HF_TOKEN=*** loaded"),
        ("argv: --api-key sk-1 --port 8000", "argv: --api-key *** --port 8000"),
        (
            "non-default args: {'api_key': 'sk-9', 'port': 8000}",
            "non-default args: {'api_key': '***', 'port': 8000}",
        ),
        ('{"hf_token": "hf_x", "model": "tiny"}', '{"hf_token": "***", "model": "tiny"}'),
        ("header Authorization: Bearer abc.def", "header Authorization: Bearer ***"),
        ("DB_PASSWORD: hunter2", "DB_PASSWORD: ***"),
    ],
)
def test_log_lines_have_their_secrets_masked(line, shown):
    assert redact_text(line) == shown


@pytest.mark.parametrize(
    "line",
    [
        "pdctl sim: error: cannot listen (address already in use); the ports come from --port 1",
        "--max-num-batched-tokens 8192 --max-model-len 4096",
        'kv_transfer_params: {"remote_block_ids": [1, 2]}',
        "INFO 11-29 12:00:01 engine.py:12] Avg prompt throughput: 10.0 tokens/s",
    ],
)
def test_plain_log_lines_pass_unchanged(line):
    assert redact_text(line) == line


# -- every shape the outside probe found unmasked (issue 13, finding 6) ------------------


@pytest.mark.parametrize(
    ("argv", "secret"),
    [
        (["--api-key", "-starts-with-dash"], "-starts-with-dash"),
        (["--api-key", "--looks-like-a-flag"], "--looks-like-a-flag"),
        (["--api-key=-dash"], "-dash"),
        (["--hf-overrides", '{"api_key": "sk-json-1", "n": 1}'], "sk-json-1"),
        (['--hf-overrides={"auth": {"hf_token": "hf-nested"}}'], "hf-nested"),
        (["--kv-transfer-config", '{"kv_connector_extra_config": {"secret": "s3"}}'], "s3"),
        (["--db=postgres://u:pw-in-url@host/db"], "pw-in-url"),
        (["https://ghp_tokenonly@github.com/org/repo"], "ghp_tokenonly"),
    ],
)
def test_argv_shapes_are_masked(argv: list[str], secret: str) -> None:
    shown = redact_argv(argv)
    assert secret not in repr(shown), shown
    assert redact_command(shlex.join(argv)).count(secret) == 0


def test_a_spec_masks_connector_config_urls_and_pats_and_leaves_the_rest() -> None:
    spec = {
        "name": "pd",
        "model": "tiny",
        "env": {
            "DATABASE_URL": "postgres://app:db-pw-1@db.internal:5432/pd",
            "GITHUB_PAT": "ghp_abc",
            "MY_FLAG": "1",
        },
        "kv_connector_extra_config": {
            "backends": ["UCX"],
            "access_key": "ak-1",
            "password": 42,
            "api_keys": ["k1", "k2"],
        },
        "groups": [{"name": "p", "extra_args": ["--hf-overrides", '{"hf_token": "hf-2"}']}],
    }
    shown = redact_spec(spec)
    text = repr(shown)
    for secret in ("db-pw-1", "ghp_abc", "ak-1", "42", "k1", "k2", "hf-2"):
        assert secret not in text, secret
    assert shown["env"]["DATABASE_URL"] == f"postgres://app:{MASK}@db.internal:5432/pd"
    assert shown["env"]["MY_FLAG"] == "1"
    assert shown["kv_connector_extra_config"]["backends"] == ["UCX"]
    assert shown["model"] == "tiny"


def test_log_lines_mask_url_passwords_and_pats() -> None:
    line = "connecting to postgres://u:hunter2@db/x with GITHUB_PAT=ghp_1"
    assert redact_text(line) == f"connecting to postgres://u:{MASK}@db/x with GITHUB_PAT={MASK}"


SPEC_WITH_SECRETS = {
    "name": "pd",
    "env": {"HF_TOKEN": "hf_top", "DATABASE_URL": "postgres://u:pw@h/d"},
    "extra_args": ["--api-key", "-sk-1", "--seed", "3", '--hf-overrides={"api_key":"j"}'],
    "groups": [
        {"name": "p", "env": {"S3_SECRET": "s3"}, "extra_args": ["--api-key=sk-2"]},
        {"name": "d", "env": {"OTHER_SECRET": "o"}, "extra_args": []},
    ],
}


def test_a_form_saved_as_shown_keeps_every_stored_secret() -> None:
    shown = redact_spec(SPEC_WITH_SECRETS, UNCHANGED)
    assert "hf_top" not in repr(shown) and UNCHANGED in repr(shown)
    assert restore_secrets(shown, SPEC_WITH_SECRETS) == SPEC_WITH_SECRETS


def test_a_secret_typed_anew_is_taken_and_moved_lines_keep_theirs() -> None:
    shown = redact_spec(SPEC_WITH_SECRETS, UNCHANGED)
    shown["env"]["HF_TOKEN"] = "hf_new"
    shown["extra_args"] = ["--max-model-len", "4096", *shown["extra_args"]]
    shown["groups"] = list(reversed(shown["groups"]))  # groups matched by name
    saved = restore_secrets(shown, SPEC_WITH_SECRETS)
    assert saved["env"] == {"HF_TOKEN": "hf_new", "DATABASE_URL": "postgres://u:pw@h/d"}
    assert saved["extra_args"][:4] == ["--max-model-len", "4096", "--api-key", "-sk-1"]
    assert saved["groups"][1]["extra_args"] == ["--api-key=sk-2"]
    assert saved["groups"][0]["env"] == {"OTHER_SECRET": "o"}
    assert not holds_mask(saved)


def test_a_marker_with_nothing_stored_behind_it_is_left_for_the_caller_to_refuse() -> None:
    shown = redact_spec(SPEC_WITH_SECRETS, UNCHANGED)
    shown["groups"][0]["env"]["NEW_TOKEN"] = UNCHANGED
    assert holds_mask(restore_secrets(shown, SPEC_WITH_SECRETS))


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["--api-key", "k1", "k2", "--port", "1"], ["--api-key", "***", "***", "--port", "1"]),
        (["--api-key=k1", "k2", "k3"], ["--api-key=***", "***", "***"]),
        (["--api-key", "-k1", "k2", "-p"], ["--api-key", "***", "***", "-p"]),
        (["--hf-token", "a", "b"], ["--hf-token", "***", "***"]),
    ],
)
def test_every_value_of_a_flag_that_takes_several_is_masked(argv, shown) -> None:
    assert redact_argv(argv) == shown


@pytest.mark.parametrize(
    "line",
    [
        "vllm serve m --api-key k1 k2-secret --port 1",
        "vllm serve m --api-key=k1 k2-secret",
        "vllm serve m --api-key 'k1' 'k2-secret'",
        "non-default args: {'api_key': ['k1', 'k2-secret'], 'port': 1}",
        'api_key=["k1", "k2-secret"]',
    ],
)
def test_every_value_of_a_secret_is_masked_in_text(line) -> None:
    shown = redact_text(line)
    assert "k1" not in shown and "k2-secret" not in shown, shown


def test_a_status_row_shows_the_command_masked() -> None:
    from controller.launch.ports import allocate
    from controller.launch.render import LaunchSettings, render
    from controller.supervise import machine as m
    from controller.supervise.units import Supervised, Unit, describe
    from tests.controller.factories import tiny_pair

    spec = tiny_pair(extra_args=["--api-key", "k1", "k2-secret"])
    ports = allocate(spec)
    launches = render(spec, ports, LaunchSettings(pdctl_command=("pdctl",)))
    units = {launch.name: Unit(launch, m.Machine()) for launch in launches}
    dep = Supervised(spec.name, spec, ports, Path("/nowhere"), units)
    rows = [describe(dep, unit, 0.0, 0.0) for unit in units.values()]
    assert any("--api-key" in row["command"] for row in rows)
    assert not any("k2-secret" in row["command"] or "k1" in row["command"] for row in rows)
