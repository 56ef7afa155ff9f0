"""`pdctl bench` and the real openai client -> `pdctl proxy` -> NIXL stand-ins (read mode)."""

import http.client
import json

import openai
import pytest

from harness.processes import metric_value, running
from harness.stack import bench, gauge, nixl_sim, proxy, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def nixl_stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nixl")
    prefill, decode = (
        nixl_sim(tmp, "prefill", "kv_producer"),
        nixl_sim(tmp, "decode", "kv_consumer"),
    )
    with running(prefill, decode):
        front = proxy(
            tmp,
            "proxy",
            "--connector",
            "nixl",
            "--mode",
            "read",
            "--prefill",
            prefill.url,
            "--decode",
            decode.url,
        )
        with running(front):
            yield tmp, prefill, decode, front


def test_bench_through_the_proxy_moves_every_prompt_by_nixl(nixl_stack):
    tmp, _, decode, front = nixl_stack
    transfers = gauge(decode, "vllm:nixl_xfer_time_seconds_count")
    result = bench(
        tmp,
        front.url,
        "--request-rate",
        "50",
        "--num-prompts",
        "24",
        "--input-len",
        "128",
        "--output-len",
        "12",
    )
    assert result["completed"] == 24 and result["failed"] == 0
    assert result["total_output_tokens"] == 24 * 12
    assert result["median_ttft_ms"] > 0 and result["median_itl_ms"] > 0
    # Each request really went prefill -> KV pull -> decode.
    assert gauge(decode, "vllm:nixl_xfer_time_seconds_count") - transfers == 24
    assert (
        gauge(decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer")
        >= 24 * 127
    )
    # The proxy saw what the bench saw.
    # The proxy records a request just after its last byte left, so the client can be first.
    wait_until(
        lambda: metric_value(front.metrics(), "pdctl_proxy_requests_total", outcome="ok") >= 24,
        5,
        "the proxy counted 24 ok",
    )


def test_bench_chat_endpoint_through_the_proxy(nixl_stack):
    tmp, _, _, front = nixl_stack
    result = bench(
        tmp,
        front.url,
        "--endpoint",
        "chat",
        "--request-rate",
        "inf",
        "--num-prompts",
        "8",
        "--input-len",
        "64",
        "--output-len",
        "6",
        name="bench-chat",
    )
    assert result["completed"] == 8 and result["total_output_tokens"] == 48


@pytest.fixture
def client(nixl_stack):
    client = openai.OpenAI(
        base_url=nixl_stack[3].url + "/v1", api_key="none", max_retries=0, timeout=30
    )
    yield client
    client.close()


@pytest.mark.parametrize("max_tokens", [1, 9])
def test_openai_completions_unstreamed_exact_tokens(client, max_tokens):
    answer = client.completions.create(
        model="tiny",
        prompt="the quick brown fox " * 20,
        max_tokens=max_tokens,
        extra_body={"ignore_eos": True},
    )
    assert answer.usage.completion_tokens == max_tokens
    assert answer.choices[0].finish_reason == "length"
    assert len(answer.choices[0].text.split()) == max_tokens


def test_openai_completions_streamed_exact_tokens(client):
    stream = client.completions.create(
        model="tiny",
        prompt="the quick brown fox " * 20,
        max_tokens=11,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    texts, usage = [], None
    for chunk in stream:
        texts += [c.text for c in chunk.choices if c.text]
        usage = chunk.usage or usage
    assert len(texts) == 11 and usage.completion_tokens == 11


def test_openai_chat_unstreamed_exact_tokens(client):
    answer = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "tell me a story"}],
        max_tokens=7,
        extra_body={"ignore_eos": True},
    )
    assert answer.usage.completion_tokens == 7
    assert len(answer.choices[0].message.content.split()) == 7


def test_openai_chat_streamed_exact_tokens(client):
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "tell me a story"}],
        max_completion_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    deltas, usage = [], None
    for chunk in stream:
        deltas += [c.delta.content for c in chunk.choices if c.delta.content]
        usage = chunk.usage or usage
    assert len(deltas) == 5 and usage.completion_tokens == 5


def test_openai_models_and_errors_through_the_proxy(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    with pytest.raises(openai.BadRequestError, match="prompt"):
        client.completions.create(model="tiny", prompt="", max_tokens=3)


def test_a_client_that_hangs_up_right_after_done_is_counted_ok(nixl_stack):
    """Clients (vLLM's bench, pdctl bench) stop reading at `data: [DONE]` and close before the
    closing HTTP chunk: the request was served in full and must count as ok, with its TTFT."""
    front = nixl_stack[3]

    def counts():
        text = front.metrics()
        return {
            outcome: metric_value(text, "pdctl_proxy_requests_total", outcome=outcome)
            for outcome in ("ok", "cancelled", "failed")
        } | {"ttft": metric_value(text, "pdctl_proxy_ttft_seconds_count")}

    before = counts()
    host, port = front.url.removeprefix("http://").split(":")
    for _ in range(12):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        body = {
            "model": "tiny",
            "prompt": "hi " * 30,
            "max_tokens": 3,
            "ignore_eos": True,
            "stream": True,
        }
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        for line in response:
            if line.startswith(b"data: [DONE]"):
                break
        conn.sock.close()  # hang up at once, as an aiohttp client leaving its `async with`
        conn.close()
    wait_until(
        lambda: sum(counts()[o] - before[o] for o in ("ok", "cancelled", "failed")) >= 12,
        5,
        "all 12 recorded",
    )
    after = counts()
    assert after["cancelled"] == before["cancelled"] and after["failed"] == before["failed"]
    assert after["ok"] - before["ok"] == 12 and after["ttft"] - before["ttft"] == 12
