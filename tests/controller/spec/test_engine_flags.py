"""The engine argv allowlist: vLLM's own flags (0.32.0) and the stand-in's, minus code loaders."""

from __future__ import annotations

import pytest

from controller.spec.engine_flags import (
    VLLM_FLAGS_FILE,
    check_args,
    refused,
    resolve,
    sim_flags,
    vllm_flags,
)


def problems(args: list[str], engine: str = "vllm") -> list[tuple[int, str]]:
    return [(p.index, p.message) for p in check_args(args, engine)]


def test_the_flag_list_is_vllm_0_32s_own() -> None:
    assert VLLM_FLAGS_FILE.read_text().startswith("# vLLM 0.32.0:")
    flags = vllm_flags()
    assert {"--dtype", "--enforce-eager", "--no-enforce-eager", "-tp", "--api-key"} <= set(flags)
    assert flags["-tp"].dest == "tensor_parallel_size" and flags["--enforce-eager"].nargs == "0"
    # Every refusal names a real dest, so a rename in vLLM cannot silently reopen a flag.
    assert set(refused("vllm")) <= {f.dest for f in flags.values()}


@pytest.mark.parametrize(
    "args",
    [
        ["--dtype", "bfloat16"],
        ["--dtype=bfloat16", "--enforce-eager"],
        ["--enable-expert-parallel", "--distributed-executor-backend", "mp"],
        ["--gpu-memory-utilization", "0.9", "--seed", "-1"],
        ["--chat-template", "{{ messages }}", "--chat-template-content-format", "string"],
        ["--api-key", "k1", "k2"],
        ["--hf-token", "--seed=3"],  # --hf-token's value is optional
        ["--kv_cache_dtype", "fp8"],
        ["--enforce-e"],  # an unambiguous prefix is its flag
        ["-O3", "-q", "fp8"],
        ["--spec-model", "org/draft-model"],
        ["--override-generation-config", '{"temperature": 0.5}'],
    ],
)
def test_vllm_flags_pass(args: list[str]) -> None:
    assert problems(args) == []


CODE_FLAGS = [
    "--trust-remote-code",
    "--trust_remote_code",
    "--trust-remote",
    "--middleware=evil.App",
    "--tool-parser-plugin=/tmp/p.py",
    "--reasoning-parser-plugin=/tmp/p.py",
    "--config=/tmp/more-flags.yaml",
    "--logits-processors=evil.LP",
    "--worker-cls=evil.W",
    "--worker-extension-cls=evil.W",
    "--scheduler-cls=evil.S",
    "--compilation-config.backend=evil.compile",
    "-cc={}",
    "--logging-config={}",
    "--log-config-file=/tmp/log.json",
    "--allowed-local-media-path=/",
    "--enable-prompt-embeds",
    "--model-class-overrides={}",
]


@pytest.mark.parametrize("flag", CODE_FLAGS)
def test_code_loading_flags_are_refused_in_every_spelling(flag: str) -> None:
    [(index, message)] = problems([flag])
    assert index == 0 and "is refused" in message
    assert [p.overridable for p in check_args([flag], "vllm")] == [True]


@pytest.mark.parametrize(
    ("args", "index", "says"),
    [
        (["--foo", "--host=0.0.0.0"], 1, "--host is set by pdctl"),
        (["--foo"], 0, "--foo is not a flag of vllm serve 0.32.0"),
        (["--seed", "--host=0.0.0.0"], 0, "--seed needs a value"),
        (["--seed"], 0, "--seed needs a value"),
        (["--seed", "1", "2"], 2, "'2' is not a flag, nor the value of one"),
        (["0.0.0.0"], 0, "is not a flag, nor the value of one"),
        (["--enforce-eager", "x"], 1, "is not a flag, nor the value of one"),
        (["--enforce-eager=yes"], 0, "is a switch and takes no value"),
        (["--KV-TRANSFER-config={}"], 0, "names are case-sensitive"),
        (["--enable"], 0, "an abbreviation must be unambiguous"),
        (["--distributed-executor-backend", "evil.Exec"], 1, "takes one of external_launcher"),
        (["--spec-model", "evil.Proposer"], 1, "reads as an import path"),
        (["--hf-overrides", '{"kv_connector_module_path": "m"}'], 1, "module_path"),
        (["--uds", "/tmp/x.sock"], 0, "moves the engine off the TCP port"),
    ],
)
def test_every_token_is_a_flag_or_the_value_of_one(args: list[str], index: int, says: str) -> None:
    found = problems(args)
    assert any(i == index and says in m for i, m in found), found


def test_a_refused_flags_value_is_not_reported_again() -> None:
    assert [i for i, _ in problems(["--middleware", "evil.App", "--dtype", "half"])] == [0]


def test_an_override_lets_exactly_its_flag_through() -> None:
    assert check_args(["--trust-remote-code"], "vllm")
    assert (
        check_args(["--trust-remote-code"], "vllm", unsafe=frozenset({"--trust-remote-code"})) == []
    )
    assert check_args(["--middleware=x"], "vllm", unsafe=frozenset({"--trust-remote-code"}))


def test_resolve_reads_tokens_as_vllms_parser_does() -> None:
    assert resolve("--max_model_len=5", "vllm")[0].option == "--max-model-len"
    assert resolve("--compilation-config.mode=3", "vllm")[0].option == "--compilation-config"
    flag, value = resolve("-O3", "vllm")
    assert (flag.option, value) == ("--optimization-level", "3")
    assert resolve("--enable", "vllm")[0] is None  # ambiguous


def test_the_stand_in_takes_its_own_flags_and_refuses_the_rest() -> None:
    assert {"--kv-link-gbps", "--kv-wire-scale", "--seed", "--dtype"} <= set(sim_flags())
    assert problems(["--seed", "7", "--dtype=bfloat16", "--kv-link-gbps", "3"], "sim") == []
    assert problems(["--enforce-eager", "--disable-log-stats"], "sim") == []
    [(_, message)] = problems(["--api-key", "k"], "sim")
    assert "not a flag of the stand-in (pdctl sim)" in message and "--kv-link-gbps" in message
    # click takes names as written, and the hidden test knobs are not a spec's to set
    assert problems(["--kv_link_gbps=3"], "sim")
    assert problems(["--enable-fault-injection"], "sim")
    assert problems(["--registration-interval", "0.1"], "sim")
    # the stand-in ignores --trust-remote-code, but a spec that carries it is refused anyway
    assert "is refused" in problems(["--trust-remote-code"], "sim")[0][1]
