"""`make bench-measure`'s reading of both clients' result files, and the tokenizer it gives
vLLM's client (benchmarks/measure/client_records.py, benchmarks/measure/vllm_client.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.records import RequestRecord
from bench.report import request_details
from benchmarks.measure.client_records import Pooled, paired
from benchmarks.measure.vllm_client import write_standin_tokenizer
from domain.workload.tokenizer import VOCAB, encode


def test_pdctl_and_vllm_result_files_pool_alike() -> None:
    ok = RequestRecord(ok=True, prompt_tokens=4, output_tokens=3, ttft=0.01, itl=[0.002, 0.004])
    ok.e2el = 0.016
    failed = RequestRecord(ok=False, error="HTTP 500", prompt_tokens=4)
    pdctl_file = request_details([ok, failed])
    vllm_file = {  # the lists `vllm bench serve --save-detailed` writes
        "errors": ["", "boom"],
        "ttfts": [0.01, 0.0],
        "itls": [[0.002, 0.004], []],
        "latencies": [0.016, 0.0],
        "output_lens": [3, 0],
        "input_lens": [4, 4],
    }
    pooled = [Pooled(), Pooled()]
    pooled[0].add(pdctl_file)
    pooled[1].add(vllm_file)
    for one in pooled:
        assert one.failed == 1 and one.lengths() == "4"
        stats = one.stats()
        assert stats["median_ttft_ms"] == pytest.approx(10.0)
        assert stats["median_itl_ms"] == pytest.approx(3.0)
        assert stats["median_tpot_ms"] == pytest.approx(3.0)  # (16 - 10) / (3 - 1)


def test_standin_tokenizer_has_the_standin_words_in_id_order(tmp_path: Path) -> None:
    folder = write_standin_tokenizer(tmp_path / "tok")
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    assert tokenizer["pre_tokenizer"] == {"type": "WhitespaceSplit"}
    assert all(vocab[word] == i for i, word in enumerate(VOCAB))
    assert encode(" ".join(VOCAB[:5])) == [vocab[w] for w in VOCAB[:5]]
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"]


def test_paired_compares_the_same_request_of_each_round() -> None:
    def run(ttfts: list[float], errors: list[str]) -> dict:
        n = len(ttfts)
        return {
            "errors": errors, "ttfts": ttfts, "itls": [[]] * n, "latencies": ttfts,
            "output_lens": [1] * n, "input_lens": [4] * n,
        }  # fmt: skip

    ours, theirs = Pooled(), Pooled()
    ours.add(run([0.010, 0.050, 0.020], ["", "", ""]))
    theirs.add(run([0.011, 0.040, 0.0], ["", "", "boom"]))
    ours.add(run([0.030], [""]))
    theirs.add(run([0.032], [""]))
    assert paired(ours, theirs) == pytest.approx([-0.001, 0.010, -0.002])  # the failed one left out
    theirs.add(run([0.030], [""]))
    with pytest.raises(ValueError, match="2 runs against 3"):
        paired(ours, theirs)
    ours.add(run([0.030, 0.031], ["", ""]))
    with pytest.raises(ValueError, match="2 requests against one of 1"):
        paired(ours, theirs)
