"""`pdctl bench`'s figures agree with the engine's own histograms and with the proxy's, within
the resolution of vLLM's buckets (the median falls in the same or an adjacent bucket)."""

import pytest

from harness.processes import metric_value, running, sim
from harness.stack import bench, bucket_index, histogram_buckets, proxy, wait_until

pytestmark = pytest.mark.e2e

# A 70B model on 4 x L40S: ~57 ms decode steps and ~130 ms prefills of 256 tokens, in the middle
# of wide buckets (0.05-0.075 s, 0.1-0.25 s), so a busy machine's few ms do not move a median
# across two bucket edges. 4 req/s keeps the engine about half busy with prefills: no queue.
MODEL = (
    "--model-profile",
    "llama-3.1-70b",
    "--hardware",
    "l40s",
    "-tp",
    "4",
    "--max-model-len",
    "4096",
)
LOAD = (
    "--request-rate",
    "4",
    "--num-prompts",
    "24",
    "--input-len",
    "256",
    "--output-len",
    "16",
    "--seed",
    "3",
)


def window(before: str, after: str, name: str) -> list[tuple[float, float]]:
    """The histogram of what happened between two scrapes: cumulative bucket deltas."""
    old = dict(histogram_buckets(before, name)) if name in before else {}
    return [(le, n - old.get(le, 0.0)) for le, n in histogram_buckets(after, name)]


def median_index(buckets: list[tuple[float, float]]) -> int:
    total = buckets[-1][1]
    assert total > 0, "empty histogram"
    return next(i for i, (_, n) in enumerate(buckets) if n >= total / 2)


def assert_agrees(buckets, bench_ms: float, what: str) -> None:
    engine_i, bench_i = median_index(buckets), bucket_index(buckets, bench_ms / 1000)
    bounds = [le for le, _ in buckets]
    assert abs(engine_i - bench_i) <= 1, (
        f"{what}: bench median {bench_ms:.1f} ms is in bucket le={bounds[bench_i]}, "
        f"histogram median in le={bounds[engine_i]}"
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agree")
    colocated = sim(tmp, "colocated", *MODEL)
    with running(colocated):
        yield tmp, colocated


def test_bench_agrees_with_the_engine_histograms(engine):
    tmp, colocated = engine
    before = colocated.metrics()
    result = bench(tmp, colocated.url, *LOAD, name="direct")
    after = colocated.metrics()
    assert result["completed"] == 24
    ttft = window(before, after, "vllm:time_to_first_token_seconds")
    assert ttft[-1][1] == 24
    assert_agrees(ttft, result["median_ttft_ms"], "TTFT vs vllm:time_to_first_token_seconds")
    itl = window(before, after, "vllm:inter_token_latency_seconds")
    assert_agrees(itl, result["median_itl_ms"], "ITL vs vllm:inter_token_latency_seconds")
    assert 40 < result["median_itl_ms"] < 150  # the modelled step, not the machine's speed


def test_bench_agrees_with_the_proxy_and_the_engine_through_the_proxy(engine):
    tmp, colocated = engine
    front = proxy(tmp, "proxy", "--mode", "colocated", "--instance", colocated.url)
    with running(front):
        engine_before = colocated.metrics()
        result = bench(tmp, front.url, *LOAD, name="proxied")
        # The proxy records a request just after its last byte left: the client can be first.
        wait_until(
            lambda: metric_value(front.metrics(), "pdctl_proxy_ttft_seconds_count") >= 24,
            5,
            "the proxy recorded 24 requests",
        )
        engine_after, proxy_text = colocated.metrics(), front.metrics()
    assert result["completed"] == 24
    proxy_ttft = window("", proxy_text, "pdctl_proxy_ttft_seconds")
    assert proxy_ttft[-1][1] == 24
    assert_agrees(proxy_ttft, result["median_ttft_ms"], "TTFT vs pdctl_proxy_ttft_seconds")
    proxy_itl = window("", proxy_text, "pdctl_proxy_itl_seconds")
    assert_agrees(proxy_itl, result["median_itl_ms"], "ITL vs pdctl_proxy_itl_seconds")
    engine_ttft = window(engine_before, engine_after, "vllm:time_to_first_token_seconds")
    assert_agrees(
        engine_ttft,
        result["median_ttft_ms"],
        "TTFT through the proxy vs vllm:time_to_first_token_seconds",
    )
