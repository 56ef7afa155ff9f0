"""The stand-in's MoRIIO transfer metrics, held to newer vLLM's, and the recompute fault.

The names, help strings, labels and buckets below were read in vLLM's source:
vllm/distributed/kv_transfer/kv_connector/v1/moriio/stats.py at commit
082b8b341bb0c83b7d1de026f2afe4c81856719d (class MoRIIOPromMetrics: time_buckets
0.001 ... 5.0, xfer time takes time_buckets[1:], post time all of them; bytes 2 ** (10 + i)
for i in range(1, 25, 2); descriptors 10 ... 50000; counters with the engine's labels).
"""

import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.processes import http_post, metric_value, running
from tests.simulator.server.test_app_handoff import PROMPT, complete, moriio

pytestmark = pytest.mark.e2e

TIME = [0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
DESCRIPTORS = [10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000]
VLLM_MORIIO = {
    "vllm:moriio_xfer_time_seconds": (
        "histogram",
        "Histogram of transfer duration for MoRI IO KV Cache transfers.",
        TIME[1:],
    ),
    "vllm:moriio_post_time_seconds": (
        "histogram",
        "Histogram of transfer post time for MoRI IO KV Cache transfers.",
        TIME,
    ),
    "vllm:moriio_bytes_transferred": (
        "histogram",
        "Histogram of bytes transferred per MoRI IO KV Cache transfers.",
        [2 ** (10 + i) for i in range(1, 25, 2)],
    ),
    "vllm:moriio_num_descriptors": (
        "histogram",
        "Histogram of number of descriptors per MoRI IO KV Cache transfers.",
        DESCRIPTORS,
    ),
    "vllm:moriio_num_failed_transfers": (
        "counter",
        "Number of failed MoRI IO KV Cache transfers.",
        None,
    ),
    "vllm:moriio_num_failed_notifications": (
        "counter",
        "Number of failed MoRI IO KV Cache notifications.",
        None,
    ),
    "vllm:moriio_num_kv_expired_reqs": (
        "counter",
        "Number of requests that had their KV expire. NOTE: This metric is tracked on the P "
        "instance.",
        None,
    ),
}


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def hand_off(prefill, decode, max_tokens: int = 4) -> int:
    """One MoRIIO read-mode request by hand, as the proxy sends it; the decode's status."""
    tx = "tx-" + uuid.uuid4().hex
    leg = {"transfer_id": tx, "remote_dp_size": 1, "remote_tp_size": 1}
    _, first = complete(
        prefill,
        max_tokens=1,
        kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False, **leg},
    )
    p = first["kv_transfer_params"]
    status, _ = complete(
        decode,
        max_tokens=max_tokens,
        kv_transfer_params={
            "do_remote_decode": False,
            "do_remote_prefill": True,
            "remote_engine_id": p["remote_engine_id"],
            "remote_block_ids": p["remote_block_ids"],
            "remote_host": p["remote_host"],
            "remote_handshake_port": p["remote_handshake_port"],
            **leg,
        },
    )
    return status


def test_moriio_metrics_are_named_labelled_and_bucketed_as_vllm_and_count_each_transfer(
    tmp_path,
):
    (prefill, _), (decode, _) = (
        moriio(tmp_path, "p", "kv_producer", True),
        moriio(tmp_path, "d", "kv_consumer", True, flags=("--enable-fault-injection",)),
    )
    with running(prefill, decode):
        assert hand_off(prefill, decode) == 200
        text = decode.metrics()
        found = families(text)
        for name, (kind, doc, buckets) in VLLM_MORIIO.items():
            family = found[name]
            assert (family.type, family.documentation) == (kind, doc), name
            labels = {k for s in family.samples for k in s.labels} - {"le"}
            assert labels == {"model_name", "engine"}, name
            assert all(s.labels["engine"] == "0" for s in family.samples), name
            if buckets is not None:
                bounds = [
                    float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")
                ]
                assert bounds == [*map(float, buckets), float("inf")], name
        assert metric_value(text, "vllm:moriio_xfer_time_seconds_count") == 1
        tokens = len(PROMPT) - 1
        per_token = metric_value(text, "vllm:moriio_bytes_transferred_sum") / tokens
        assert per_token == 131072  # llama-3.1-8b: 32 layers x 8 kv heads x 128 x 2 x 2
        assert metric_value(text, "vllm:moriio_num_failed_transfers_total") == 0
        assert not any(n.startswith("vllm:nixl_") for n in found)

        # The recompute fault: the decode ignores the KV, computes the prompt itself and
        # still answers 200; no transfer is counted, the prompt counts as local_compute.
        http_post(decode.url + "/_fault", {"fault": "recompute"})
        assert hand_off(prefill, decode) == 200
        after = decode.metrics()
        by_source = "vllm:prompt_tokens_by_source_total"
        assert metric_value(after, "vllm:moriio_xfer_time_seconds_count") == 1
        assert metric_value(after, by_source, source="external_kv_transfer") == tokens
        assert metric_value(after, by_source, source="local_compute") == 1 + len(PROMPT)
        # ... at the prefill's compute cost (~130 ms for 2,000 tokens on an L40S), which a
        # transfer of those tokens (~5 ms over 50 GB/s) does not take
        prefill_s = metric_value(after, "vllm:request_prefill_time_seconds_sum")
        before_s = metric_value(text, "vllm:request_prefill_time_seconds_sum")
        assert prefill_s - before_s > 0.05 > before_s


def test_older_moriio_exports_no_transfer_metrics(tmp_path):
    (prefill, _), (decode, _) = (
        moriio(tmp_path, "p", "kv_producer", True, flags=("--moriio-metrics", "none")),
        moriio(tmp_path, "d", "kv_consumer", True, flags=("--moriio-metrics", "none")),
    )
    with running(prefill, decode):
        assert hand_off(prefill, decode) == 200
        text = decode.metrics()
        assert not any(n.startswith(("vllm:moriio_", "vllm:nixl_")) for n in families(text))
        by_source = "vllm:prompt_tokens_by_source_total"
        assert metric_value(text, by_source, source="external_kv_transfer") == len(PROMPT) - 1
