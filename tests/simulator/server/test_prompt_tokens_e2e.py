"""`pdctl sim` given the tiny Llama's tokenizer (--tokenizer, or --model's folder) reports the
prompt tokens a `tokenizers` client counts; without one, the estimate (~4 characters a token)."""

import random
import shutil
from pathlib import Path

import openai
import pytest
from tokenizers import Tokenizer

from domain.workload import tokenizer as estimate
from harness.processes import running, sim

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[2] / "fixtures"
TINY = FIXTURES / "vllm" / "tiny_tokenizer"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A model folder as vLLM takes it: config.json and the tokenizer's files."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    shutil.copy(FIXTURES / "model_configs" / "tiny" / "config.json", folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY / name, folder)
    return folder


def _prompts(n: int) -> list[str]:
    client = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    rng = random.Random(1)
    return [client.decode([rng.randrange(6, 2048) for _ in range(256)]) for _ in range(n)]


@pytest.mark.parametrize("how", ["--tokenizer", "--model"])
def test_served_prompt_tokens_equal_the_clients(tmp_path, tiny_folder, how):
    flags = ["--tokenizer", str(TINY)] if how == "--tokenizer" else ["--model", str(tiny_folder)]
    proc = sim(tmp_path, "sim", *flags, "--served-model-name", "tiny-llama")
    client = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    with running(proc):
        api = openai.OpenAI(base_url=proc.url + "/v1", api_key="none", max_retries=0)
        for text in _prompts(5):
            out = api.completions.create(model="tiny-llama", prompt=text, max_tokens=1)
            assert out.usage.prompt_tokens == len(client.encode(text).ids)
        chat = api.chat.completions.create(
            model="tiny-llama", messages=[{"role": "user", "content": "hello"}], max_tokens=1
        )
        # The tiny Llama's chat template (tokenizer_config.json), rendered as vLLM renders it.
        rendered = "<|begin_of_text|><|user|>\nhello<|end|>\n<|assistant|>\n"
        assert chat.usage.prompt_tokens == len(
            client.encode(rendered, add_special_tokens=False).ids
        )


def test_without_a_tokenizer_english_counts_by_the_estimate(tmp_path):
    text = "The quick brown fox jumps over the lazy dog while the scheduler batches requests."
    proc = sim(tmp_path, "sim")
    with running(proc):
        api = openai.OpenAI(base_url=proc.url + "/v1", api_key="none", max_retries=0)
        out = api.completions.create(model="tiny", prompt=text, max_tokens=1)
    assert out.usage.prompt_tokens == estimate.count_tokens(text) == round(len(text) / 4)
