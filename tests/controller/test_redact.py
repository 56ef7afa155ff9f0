"""Secrets masked in what people are shown (previews, events), and only there: the argv and env
that run keep them."""

from __future__ import annotations

import shlex

import pytest

from controller.ports import allocate
from controller.redact import (
    MASK,
    is_secret_name,
    redact_argv,
    redact_command,
    redact_env,
    redact_spec,
    redact_text,
)
from controller.render import preview, render
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
