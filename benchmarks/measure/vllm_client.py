"""vLLM's own client for `make bench-measure`: where the real-vLLM venv is, a tokenizer that
counts the stand-in's way, and `vllm bench serve` runs in one long-lived process.

The tokenizer matters: vLLM's random dataset makes prompts of N tokens of *its* tokenizer
and sends them as text, and the stand-in counts text with pdctl's tokenizer (one token per
word). With the tiny Llama's tokenizer a 256-token prompt is about 67 stand-in tokens, so the
stand-in prefills a quarter of the prompt and vLLM's TTFT reads low. A tokenizer whose
vocabulary is the stand-in's words (a WordLevel tokenizer.json) makes vLLM's prompts exactly
as long, by the server's count, as it says they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from domain.workload.tokenizer import VOCAB

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
CACHE = Path.home() / ".cache" / "pdctl"
UNKNOWN = "<unk>"
HOW_TO_GET_IT = "`make test-vllm` sets up the real-vLLM venv (tests/fixtures/vllm/setup_venv.sh)"


def vllm_python() -> Path | None:
    """The vLLM venv's python, found as `make test-vllm` finds it (PDCTL_VLLM_PYTHON, else
    setup_venv.sh's path: PDCTL_VLLM_VENV or ~/.cache/pdctl/vllm-venv-<requirements hash>);
    None when it is not set up (setup_venv.sh marks a finished venv with .pdctl-installed)."""
    if os.environ.get("PDCTL_VLLM_PYTHON"):
        python = Path(os.environ["PDCTL_VLLM_PYTHON"])
        return python if python.exists() else None
    key = hashlib.sha256((FIXTURES / "requirements.txt").read_bytes()).hexdigest()[:12]
    venv = Path(os.environ.get("PDCTL_VLLM_VENV") or CACHE / f"vllm-venv-{key}")
    python = venv / "bin" / "python"
    return python if python.exists() and (venv / ".pdctl-installed").exists() else None


def tiny_llama() -> Path | None:
    """The tiny Llama `make test-vllm` caches (PDCTL_TINY_MODEL, else keyed on the hash of
    make_tiny_model.py), for the row that shows what its tokenizer does to the prompts."""
    if os.environ.get("PDCTL_TINY_MODEL"):
        model = Path(os.environ["PDCTL_TINY_MODEL"])
    else:
        key = hashlib.sha1((FIXTURES / "make_tiny_model.py").read_bytes()).hexdigest()[:12]
        model = CACHE / f"tiny-llama-{key}"
    return model if (model / "tokenizer.json").exists() else None


def write_standin_tokenizer(folder: Path) -> Path:
    """A Hugging Face tokenizer whose tokens are the stand-in's: one per whitespace-separated
    word of domain.workload.tokenizer's vocabulary, ids in the same order, decoding joined by
    spaces."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {word: i for i, word in enumerate(VOCAB)}
    vocab[UNKNOWN] = len(VOCAB)
    unknown = {"id": len(VOCAB), "content": UNKNOWN, "special": True, "normalized": False}
    unknown |= {"single_word": False, "lstrip": False, "rstrip": False}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [unknown],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": UNKNOWN},
    }
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNKNOWN}
    config["model_max_length"] = 1 << 20
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return folder


class VllmBenchServe:
    """`vllm bench serve` runs, one at a time, in one process of the vLLM venv."""

    def __init__(self, python: Path, log: Path, prefix: list[str]) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [*prefix, str(python), str(Path(__file__).with_name("vllm_bench_serve.py"))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                start_new_session=True,
            )
        self.log = log
        self._reply()  # ready: vLLM is imported

    def run(self, args: list[str], trust_env: bool = True, uvloop: bool = False) -> None:
        """One run; `trust_env=False` and `uvloop=True` only for the diagnostics
        (vllm_bench_serve.py says what)."""
        self._job({"argv": args, "trust_env": trust_env, "uvloop": uvloop})

    def prompt_lens(self, args: list[str]) -> tuple[list[int], list[int]]:
        """The prompt length of each request a run with these arguments sends, in the order it
        sends them: as vLLM's client counts it (its dataset, with its tokenizer), and as
        vLLM's server would count its text (with the special tokens it adds)."""
        reply = self._job({"samples": args})
        return [int(n) for n in reply["prompt_lens"]], [int(n) for n in reply["vllm_counts"]]

    def _job(self, job: dict) -> dict:
        if self.proc.stdin is None:
            raise RuntimeError("vllm bench serve has no stdin")
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        if not reply.get("ok"):
            raise RuntimeError(f"vllm bench serve failed:\n{reply.get('error')}")
        return reply

    def _reply(self) -> dict:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"vllm bench serve exited ({self.proc.wait()}):\n{tail}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
