"""Real vLLM, disaggregated, through pdctl: a 1 prefill + 1 decode deployment created and started
through the REST API (NixlConnector over UCX on CPU, then ExampleConnector over a shared
folder), requests through pdctl's proxy with the openai client, the engines' own metrics, the
dashboard's live frames, the stand-in's /metrics beside the real one, and a stop that leaves
no process behind. The pair starts once per connector (module-scoped, parametrized)."""

from __future__ import annotations

import json
import time

import pytest

from harness.processes import free_port, http_post, metric_value, running, sim
from tests.vllm import harness
from tests.vllm.conftest import MAX_TOKENS, REFERENCE_REQUESTS, client, deployed, greedy

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

EXTERNAL = {"source": "external_kv_transfer"}
# Every vLLM family the proxy and observe/ read (counters without their _total suffix).
DASHBOARD_FAMILIES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:prompt_tokens_by_source",
    "vllm:nixl_xfer_time_seconds",
    "vllm:nixl_bytes_transferred",
    "vllm:nixl_num_failed_transfers",
    "vllm:request_success",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
)


@pytest.fixture(
    scope="module", params=["NixlConnector", "ExampleConnector"], ids=["nixl", "example"]
)
def pd(request, plane, vllm_setup, reference, tmp_path_factory):
    """The running pair (after the colocated reference has run and stopped)."""
    connector = request.param
    name = "pd-nixl" if connector == "NixlConnector" else "pd-example"
    extra = None
    if connector == "ExampleConnector":
        extra = {"shared_storage_path": str(tmp_path_factory.mktemp("kv-files"))}
    spec = harness.pd_spec(name, vllm_setup.model, vllm_setup.marker, connector, extra)
    with deployed(plane, spec, vllm_setup) as live:
        yield live


def nixl(live: harness.Live) -> bool:
    return live.name == "pd-nixl"


def test_greedy_output_through_the_pair_equals_colocated(pd, reference, vllm_setup):
    before = pd.metrics("decode-0")
    api = client(pd)
    outputs = {key: greedy(api, vllm_setup.model, *key) for key in REFERENCE_REQUESTS}
    assert outputs == reference  # same text, same prompt and completion token counts
    assert all(o.prompt_tokens > 256 for o in outputs.values())  # several 128-token blocks

    after = pd.metrics("decode-0")
    moved = metric_value(after, "vllm:prompt_tokens_by_source_total", **EXTERNAL) - metric_value(
        before, "vllm:prompt_tokens_by_source_total", **EXTERNAL
    )
    prompt_tokens = sum(o.prompt_tokens for o in outputs.values())
    if nixl(pd):
        # Each prompt is new to the decode: all of it arrives by transfer (partial blocks too).
        assert moved == prompt_tokens
        transfers = metric_value(after, "vllm:nixl_xfer_time_seconds_count") - metric_value(
            before, "vllm:nixl_xfer_time_seconds_count"
        )
        assert transfers >= len(REFERENCE_REQUESTS)
        assert metric_value(after, "vllm:nixl_bytes_transferred_sum") > 0
        assert metric_value(after, "vllm:nixl_num_failed_transfers_total") == 0
    else:
        # ExampleConnector loads the whole 128-token blocks below the last prompt token.
        assert moved == sum((o.prompt_tokens - 1) // 128 * 128 for o in outputs.values())


def test_streams_give_exactly_the_tokens_asked_for(pd, vllm_setup):
    api = client(pd)
    for seed in (10, 11):
        stream = api.completions.create(
            model=str(vllm_setup.model),
            prompt=harness.prompt(seed),
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = list(stream)
        # One event per token, except that a lagging API server merges the tokens that piled
        # up into one event (seen here under load: 5 events for 12 tokens).
        assert 1 <= len([c for c in chunks if c.choices]) <= MAX_TOKENS
        assert chunks[-1].usage.completion_tokens == MAX_TOKENS
        chat = api.chat.completions.create(
            model=str(vllm_setup.model),
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            messages=[{"role": "user", "content": harness.prompt(seed + 100)}],
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        assert list(chat)[-1].usage.completion_tokens == MAX_TOKENS


def test_live_frames_carry_latency_histograms_and_kv_throughput(pd, plane, vllm_setup):
    from websockets.sync.client import connect

    api = client(pd)
    for seed in (20, 21, 22):
        list(
            api.completions.create(
                model=str(vllm_setup.model),
                prompt=harness.prompt(seed),
                max_tokens=MAX_TOKENS,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
        )

    def complete(frame: dict) -> bool:
        engine = frame.get("engine_ttft") or {}
        kv_ok = not nixl(pd) or (frame["kv"]["bytes_per_s"] or 0) > 0
        return (
            frame["ttft"]["count"] > 0
            and frame["itl"]["count"] > 0
            and engine.get("count", 0) > 0
            and kv_ok
        )

    url = f"ws://127.0.0.1:{plane.port}/ws/deployments/{pd.name}?window=1m"
    frame, deadline = None, time.monotonic() + 30
    with connect(url, open_timeout=10) as ws:
        while time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message["type"] == "frame":
                frame = message
                if complete(frame):
                    break
    assert frame is not None, "no frame within 30 s"
    assert complete(frame), harness.dump(frame)
    assert frame["simulated"] is False
    assert frame["ttft"]["p50"] is not None and frame["itl"]["p50"] is not None
    assert (frame["engine_itl"] or {}).get("count", 0) > 0
    if nixl(pd):
        assert frame["kv"]["source"] == "nixl", frame["kv"]
        assert frame["kv"]["xfer_p50_ms"] is not None
    assert {i["name"]: i["up"] for i in frame["instances"]} == {"prefill-0": True, "decode-0": True}


def test_standin_metric_families_match_the_real_ones(pd, plane, tmp_path):
    """Live, both sides: every family the dashboard reads, same presence, type and labels."""
    _, commands = plane.api("GET", f"/deployments/{pd.name}/commands")
    argv = commands["decode-0"]["argv"]
    config = argv[argv.index("--kv-transfer-config") + 1]
    standin = sim(
        tmp_path,
        "standin",
        "--served-model-name",
        "tiny",
        "--kv-transfer-config",
        config,
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port())},
    )
    with running(standin):
        status, body = http_post(
            standin.url + "/v1/completions",
            {"model": "tiny", "prompt": harness.prompt(30), "max_tokens": 4},
        )
        assert status == 200, body
        fake = harness.families(standin.metrics())
    for instance in ("prefill-0", "decode-0"):
        real = harness.families(pd.metrics(instance))
        for family in DASHBOARD_FAMILIES:
            assert (family in real) == (family in fake), (instance, family, family in real)
            if family not in real:
                continue
            kind, labels, values = real[family]
            assert fake[family][:2] == (kind, labels), (
                instance,
                family,
                real[family],
                fake[family],
            )
            for label in ("source", "finished_reason"):
                if label in values:
                    assert fake[family][2][label] == values[label], (family, label)
        assert ("vllm:nixl_xfer_time_seconds" in real) == nixl(pd)
        if nixl(pd):
            assert metric_value(pd.metrics(instance), "vllm:nixl_num_failed_transfers_total") == 0


def test_stop_through_the_api_leaves_no_process(pd, plane, vllm_setup):
    """Last test of the module: API server, engine core and every child gone."""
    units = harness.stop(plane, pd.name)
    assert {u["state"] for u in units.values()} <= {"STOPPED", "EXITED"}, units
    left = harness.wait_gone(pd, vllm_setup.model, vllm_setup.marker, timeout=30)
    assert left == [], left
