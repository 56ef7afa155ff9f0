"""`pdctl sim --enable-per-request-metrics` answers as vLLM 0.32 does: a `metrics` object
(time_to_first_token_ms, generation_time_ms, queue_time_ms, mean_itl_ms, tokens_per_second)
on a whole response, and on a stream's usage chunk only; without the flag `metrics` is null."""

import json
import urllib.request

import pytest

from harness.processes import running, sim

pytestmark = pytest.mark.e2e

FIELDS = {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms"}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sim")
    timed = sim(folder, "timed", "--enable-per-request-metrics")
    plain = sim(folder, "plain")
    with running(timed), running(plain):
        yield timed, plain


def _post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.read().decode()


def _body(max_tokens: int, stream: bool = False) -> dict:
    body = {"model": "tiny", "prompt": "a b c d", "max_tokens": max_tokens, "ignore_eos": True}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def test_whole_response_carries_the_engine_timing(engines):
    timed, _ = engines
    status, text = _post(timed.url, _body(8))
    assert status == 200
    metrics = json.loads(text)["metrics"]
    assert set(metrics) == FIELDS | {"tokens_per_second", "speculative_decoding"}
    assert metrics["time_to_first_token_ms"] > 0 and metrics["queue_time_ms"] >= 0
    # 8 tokens: 7 gaps between the first and the last
    assert metrics["mean_itl_ms"] == pytest.approx(metrics["generation_time_ms"] / 7)


def test_one_token_has_no_mean_itl(engines):
    timed, _ = engines
    metrics = json.loads(_post(timed.url, _body(1))[1])["metrics"]
    assert metrics["mean_itl_ms"] is None and metrics["time_to_first_token_ms"] > 0


def test_stream_sends_it_on_the_usage_chunk_only(engines):
    timed, _ = engines
    status, text = _post(timed.url, _body(4, stream=True))
    assert status == 200
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    with_metrics = [c for c in chunks if "metrics" in c]
    assert len(with_metrics) == 1 and with_metrics[0]["choices"] == []
    assert set(with_metrics[0]["metrics"]) >= FIELDS  # null fields left out, as vLLM's


def test_without_the_flag_metrics_is_null(engines):
    _, plain = engines
    assert json.loads(_post(plain.url, _body(4))[1])["metrics"] is None
    text = _post(plain.url, _body(4, stream=True))[1]
    assert '"metrics"' not in text
