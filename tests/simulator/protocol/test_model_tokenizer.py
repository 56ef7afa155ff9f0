"""With the tiny Llama's own tokenizer the stand-in counts prompts as real vLLM did: the counts
recorded from vLLM 0.32 (tests/fixtures/vllm) and the `tokenizers` client's agree with it."""

import json
import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from simulator.protocol import request
from simulator.protocol.model_tokenizer import ModelTokenizer, TokenizerError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm"
TINY = FIXTURES / "tiny_tokenizer"  # the recorded tiny Llama's (manifest.json sha256)


@pytest.fixture(scope="module")
def tiny():
    return ModelTokenizer(TINY)


@pytest.mark.parametrize(
    "name",
    ["completion.json", "chat.json", "colocated_long_completion.json", "colocated_long_chat.json"],
)
def test_prompt_tokens_equal_real_vllms_recorded_count(tiny, name):
    real = json.loads((FIXTURES / name).read_text())
    kind = "chat" if "messages" in real["request"]["body"] else "completion"
    raw = json.dumps(real["request"]["body"]).encode()
    gen = request.parse(
        kind, raw, "application/json", real["request"]["body"]["model"], 2048, 0, tiny
    )
    assert len(gen.prompt_token_ids) == real["body"]["usage"]["prompt_tokens"]


def test_prompt_tokens_equal_the_clients_on_random_prompts(tiny):
    # As `vllm bench serve --dataset-name random` makes prompts: random ids, decoded to text.
    client = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    rng = random.Random(0)
    for _ in range(50):
        text = client.decode([rng.randrange(6, 2048) for _ in range(rng.randrange(16, 512))])
        body = json.dumps({"model": "m", "prompt": text, "max_tokens": 1}).encode()
        gen = request.parse("completion", body, "application/json", "m", 4096, 0, tiny)
        assert len(gen.prompt_token_ids) == len(client.encode(text).ids)


def test_a_missing_tokenizer_is_refused_naming_the_file(tmp_path):
    with pytest.raises(TokenizerError, match=r"tokenizer\.json"):
        ModelTokenizer(tmp_path)
