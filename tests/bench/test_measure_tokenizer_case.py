"""`make bench-measure`'s tiny-Llama case (benchmarks/measure/model_tokenizer.py): what it
calls equal counts and a met TTFT target."""

from __future__ import annotations

import pytest

from bench.records import RequestRecord
from bench.report import request_details
from benchmarks.measure.client_records import Pooled
from benchmarks.measure.model_tokenizer import TokenizerCase, lines


def _pooled(*ttfts: float) -> Pooled:
    pooled = Pooled()
    records = [RequestRecord(ok=True, prompt_tokens=257, output_tokens=2, ttft=t) for t in ttfts]
    for r in records:
        r.e2el = r.ttft + 0.01
    pooled.add(request_details(records))
    return pooled


def _case(
    server: list[int], total: int, pdctl_ms: float, shipped_ms: float = 20.0
) -> TokenizerCase:
    """Medians: vLLM's client on pdctl's terms 21 ms, as shipped `shipped_ms` + 1, pdctl
    `pdctl_ms` + 1."""
    return TokenizerCase(
        client_lens=[256, 255],
        vllm_counts=[257, 256],
        server_lens=server,
        server_total=total,
        vllm=_pooled(shipped_ms / 1000, shipped_ms / 1000 + 0.002),
        pdctl=_pooled(pdctl_ms / 1000, pdctl_ms / 1000 + 0.002),
        vllm_again=_pooled(shipped_ms / 1000, shipped_ms / 1000 + 0.002),
        vllm_like=_pooled(0.020, 0.022),
    )


def test_counts_equal_only_when_every_request_and_the_metric_agree():
    assert _case([257, 256], 513, 20.0).counts_equal()
    assert not _case([257, 257], 514, 20.0).counts_equal()  # one request off
    assert not _case([257, 256], 512, 20.0).counts_equal()  # the server's metric off
    assert not TokenizerCase().counts_equal()  # nothing measured is not equal


def test_the_ttft_target_is_one_ms_on_the_median():
    assert _case([257, 256], 513, 20.9).met()
    assert not _case([257, 256], 513, 21.2).met()
    assert _case([257, 256], 513, 21.2).gap_ms() == pytest.approx(1.2)


def test_the_target_is_judged_against_vllms_client_on_pdctls_terms():
    """vLLM's client as shipped adds its asyncio loop and aiohttp's environment lookups to
    each request's span: printed beside, not judged."""
    assert _case([257, 256], 513, 20.5, shipped_ms=22.0).met()  # 1.5 ms under as shipped
    assert not _case([257, 256], 513, 21.5, shipped_ms=21.5).met()  # 1.5 ms over on its terms
    assert _case([257, 256], 513, 20.5, shipped_ms=22.0).gap_ms() == pytest.approx(-1.5)


def test_the_printout_gives_both_gaps():
    text = "\n".join(lines(_case([257, 256], 513, 20.9, shipped_ms=22.0), None))
    assert "pdctl-vllm +0.90 ms" in text and "; met" in text
    assert "as shipped (asyncio's loop, trust_env): 23.00 ms, pdctl-vllm -1.10 ms" in text
