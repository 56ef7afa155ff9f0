"""`pdctl bench --tokenizer`: random prompts in a model's own tokens, sent as text, so a server
that tokenizes like the model counts what the bench asked for (plus the BOS vLLM adds)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import typer
from tokenizers import Tokenizer
from typer.testing import CliRunner

from bench import model_prompts
from bench.cli import register
from domain.workload.datasets import random_requests
from harness.processes import running, sim

TINY = Path(__file__).parents[1] / "fixtures" / "vllm" / "tiny_tokenizer"


def _made(count: int, length: int, seed: int = 0):
    rng = random.Random(seed)
    requests = random_requests(count, length, 4, 0.0, rng)
    return model_prompts.in_model_tokens(requests, model_prompts.load(str(TINY)), rng)


def test_every_prompt_re_encodes_to_the_length_asked_without_special_tokens():
    client = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    special = set(client.get_added_tokens_decoder())
    for request in _made(20, 256):
        text = request.prompt_text()
        ids = client.encode(text, add_special_tokens=False).ids
        assert len(ids) == request.prompt_len == 256
        assert tuple(ids) == request.messages[0].token_ids
        assert not special & set(ids)


def test_the_same_seed_makes_the_same_prompts():
    assert [r.prompt_text() for r in _made(3, 64)] == [r.prompt_text() for r in _made(3, 64)]
    assert _made(1, 64)[0].prompt_text() != _made(1, 64, seed=1)[0].prompt_text()


def _invoke(*args: str):
    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return CliRunner().invoke(app, ["bench", *args])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tokenizer", "/nowhere/tokenizer.json"], "no tokenizer.json at /nowhere"),
        (["--tokenizer", str(Path(__file__))], "not a readable tokenizer.json"),
        (["--tokenizer", str(TINY), "--dataset", "multi-turn"], "works only with --dataset"),
    ],
)
def test_a_bad_tokenizer_is_one_line_naming_the_flag(args, needle):
    result = _invoke("--base-url", "http://127.0.0.1:9", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: invalid value for --tokenizer")
    assert needle in result.stderr and "Traceback" not in result.output


@pytest.mark.e2e
def test_a_stand_in_given_the_tokenizer_counts_the_prompts_as_asked_plus_its_bos(tmp_path):
    proc = sim(tmp_path, "sim", "--tokenizer", str(TINY), "--served-model-name", "tiny")
    out = tmp_path / "result.json"
    bos = len(Tokenizer.from_file(str(TINY / "tokenizer.json")).encode("").ids)
    with running(proc):
        result = _invoke(
            *("--base-url", proc.url, "--tokenizer", str(TINY), "--num-prompts", "6"),
            *("--input-len", "100", "--output-len", "2", "--request-rate", "inf"),
            *("--save-requests", "--result-json", str(out), "--quiet", "--timeout", "30"),
        )
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())  # one rate: the run itself, as vLLM writes it
    assert bos == 1 and run["input_lens"] == [100 + bos] * 6
