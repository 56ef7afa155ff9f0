"""vllm-router (Rust, PyPI `vllm-router`) in NIXL PD mode driving our stand-ins."""

import openai
import pytest

from harness.processes import running
from harness.stack import RouterProcess, bench, gauge, nixl_sim, router_binary

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not router_binary().exists(), reason="vllm-router is not installed"),
]


def test_vllm_router_drives_a_nixl_pair_of_stand_ins(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer")
    with running(prefill, decode):
        router = RouterProcess(tmp_path, [prefill.url], [decode.url])
        with running(router):
            client = openai.OpenAI(
                base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=30
            )
            try:
                answer = client.completions.create(
                    model="tiny",
                    prompt="the quick brown fox " * 20,
                    max_tokens=7,
                    extra_body={"ignore_eos": True},
                )
                assert answer.usage.completion_tokens == 7
                stream = client.completions.create(
                    model="tiny",
                    prompt="jumps over the lazy dog " * 20,
                    max_tokens=9,
                    stream=True,
                    stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True},
                )
                texts, usage = [], None
                for chunk in stream:
                    texts += [c.text for c in chunk.choices if c.text]
                    usage = chunk.usage or usage
                assert len(texts) == 9 and usage.completion_tokens == 9
                chat = client.chat.completions.create(
                    model="tiny",
                    messages=[{"role": "user", "content": "hi there"}],
                    max_tokens=4,
                    extra_body={"ignore_eos": True},
                )
                assert chat.usage.completion_tokens == 4
            finally:
                client.close()
            result = bench(
                tmp_path,
                router.url,
                "--request-rate",
                "inf",
                "--num-prompts",
                "10",
                "--input-len",
                "96",
                "--output-len",
                "8",
            )
            assert result["completed"] == 10 and result["total_output_tokens"] == 80
        # Every request went prefill (max_tokens=1) -> NIXL pull -> decode.
        assert gauge(decode, "vllm:nixl_xfer_time_seconds_count") == 13
        assert gauge(prefill, "vllm:request_success_total", finished_reason="length") == 13
        assert (
            gauge(decode, "vllm:prompt_tokens_by_source_total", source="local_compute") == 13
        )  # the last prompt token, recomputed
