"""The tokenizer case of `make bench-measure` (benchmarks/measure/model_tokenizer.py): the
1 ms is judged against vLLM's client on pdctl's terms, the as-shipped gap only printed."""

from benchmarks.measure.client_records import Pooled
from benchmarks.measure.model_tokenizer import TokenizerCase, lines


def _pooled(*ttft_ms: float) -> Pooled:
    pooled = Pooled()
    n = len(ttft_ms)
    pooled.add(
        {
            "errors": [""] * n,
            "ttfts": [t / 1000 for t in ttft_ms],
            "itls": [[]] * n,
            "latencies": [t / 1000 + 0.1 for t in ttft_ms],
            "output_lens": [8] * n,
            "input_lens": [256] * n,
        }
    )
    return pooled


def _case(pdctl: float, like: float, shipped: float) -> TokenizerCase:
    case = TokenizerCase(client_lens=[255], vllm_counts=[256], server_lens=[256], server_total=256)
    case.pdctl, case.vllm_like = _pooled(pdctl, pdctl), _pooled(like, like)
    case.vllm, case.vllm_again = _pooled(shipped, shipped), _pooled(shipped, shipped)
    return case


def test_met_by_vllms_client_on_pdctls_terms_whatever_its_shipped_overhead():
    assert _case(pdctl=20.5, like=20.6, shipped=22.0).met()
    assert not _case(pdctl=20.5, like=21.7, shipped=21.7).met()


def test_counts_that_differ_miss_whatever_the_ttft():
    case = _case(pdctl=20.5, like=20.5, shipped=20.5)
    case.server_lens = [257]
    assert not case.met()


def test_the_printout_gives_both_gaps():
    text = "\n".join(lines(_case(pdctl=20.5, like=20.6, shipped=22.0), None))
    assert "pdctl-vllm -0.10 ms" in text and "met" in text
    assert "as shipped (asyncio's loop, trust_env): 22.00 ms, pdctl-vllm -1.50 ms" in text
