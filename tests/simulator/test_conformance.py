"""`pdctl sim` against golden transcripts of real vLLM 0.32.0 (tests/fixtures/vllm, NOTES.md).

Shapes, not content: the stand-in's token texts, ids and timings differ by design, so bodies
and chunks are compared as key trees with value types, errors by status, type, param and
message (digits dropped), metrics by family, type, label names and bucket boundaries.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from domain.workload.tokenizer import VOCAB
from harness.processes import free_port, http_get, http_post, running, sim

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm"
MODEL = ("--served-model-name", "tiny-llama", "--max-model-len", "2048")
PROMPTS = json.loads((FIXTURES / "manifest.json").read_text())["prompts"]
# Real families the stand-in deliberately does not model (the *_created gauges go with them).
NOT_MODELLED = {
    # MFU accounting: the timing model keeps its roofline flops and bytes to itself, and real
    # vLLM reports 0 for these on CPU anyway; nothing in pdctl reads them.
    "vllm:estimated_flops_per_gpu",
    "vllm:estimated_read_bytes_per_gpu",
    "vllm:estimated_write_bytes_per_gpu",
}
# Labels whose values are an enumeration worth comparing (not names, engines or config).
ENUM_LABELS = {"finished_reason", "reason", "source", "stage", "sleep_state"}


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


# The one field the stand-in adds to vLLM's answers: a decode's own figures for its KV transfer
# (simulator/engine/request.py kv_transfer_stats; vLLM reports none per request), which pdctl's
# proxy splits the TTFT with. Clients ignore an unknown field; the shapes are compared without it.
STAND_IN_ONLY = "kv_transfer_stats"


def shape(value: object) -> object:
    """Keys in order and value types, recursively; lists by their first item."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items() if k != STAND_IN_ONLY]
    if isinstance(value, list):
        return ["list", shape(value[0])] if value else ["list"]
    return "null" if value is None else type(value).__name__


def events(raw: str) -> list[str]:
    assert raw.endswith("\n\n")
    out = raw[:-2].split("\n\n")
    assert all(e.startswith("data: ") and "\n" not in e for e in out), "one data line per event"
    return [e[len("data: ") :] for e in out]


def outline(raw: str) -> list[object]:
    """The stream's event shapes with repeats collapsed (vLLM may merge tokens per event)."""
    out: list[object] = []
    for data in events(raw):
        if data == "[DONE]":
            item: object = "[DONE]"
        else:
            parsed = json.loads(data)
            assert data == json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
            item = shape(parsed)
        if not out or out[-1] != item:
            out.append(item)
    return out


def post_raw(url: str, body: dict) -> tuple[dict[str, str], str]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()


def families(text: str) -> dict[str, tuple]:
    """vLLM families: type, label names, enumerated label values and bucket bounds."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        names = sorted({k for s in fam.samples for k in s.labels if k != "le"})
        enums = sorted(
            {(k, v) for s in fam.samples for k, v in s.labels.items() if k in ENUM_LABELS}
        )
        bounds = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
        out[fam.name] = (fam.type, names, enums, bounds)
    return out


def real_families(name: str) -> dict[str, tuple]:
    got = families((FIXTURES / name).read_text())
    return {k: v for k, v in got.items() if k.removesuffix("_created") not in NOT_MODELLED}


def normalised(message: str) -> str:
    return re.sub(r"\d+", "N", message)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    proc = sim(tmp_path_factory.mktemp("conformance"), "colocated", *MODEL)
    with running(proc):
        yield proc


def nixl(tmp, name: str, role: str):
    config = json.dumps(
        {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cpu"}
    )
    return sim(
        tmp,
        name,
        *MODEL,
        "--kv-transfer-config",
        config,
        env={
            "VLLM_NIXL_SIDE_CHANNEL_PORT": str(free_port()),
            "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
        },
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conformance-pd")
    prefill, decode = nixl(tmp, "prefill", "kv_producer"), nixl(tmp, "decode", "kv_consumer")
    with running(prefill, decode):
        yield prefill, decode


# ---- bodies and streams -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["completion.json", "chat.json", "prompt_token_ids.json"])
def test_whole_bodies_have_vllms_shape(engine, name):
    real = fixture(name)
    status, body = http_post(engine.url + real["request"]["path"], real["request"]["body"])
    assert status == real["status"] == 200
    assert shape(body) == shape(real["body"])
    assert re.fullmatch(r"(chat)?cmpl-[0-9a-f]{16}", body["id"])
    assert re.fullmatch(r"vllm-0\.32\.0-[0-9a-f]{8}", body["system_fingerprint"])
    assert body["usage"]["completion_tokens"] == real["body"]["usage"]["completion_tokens"]


def test_prompt_token_ids_count_as_given(engine):
    real = fixture("prompt_token_ids.json")
    _, body = http_post(engine.url + "/v1/completions", real["request"]["body"])
    assert body["usage"]["prompt_tokens"] == real["body"]["usage"]["prompt_tokens"] == 5


def stream_body(path: str, usage: bool) -> dict:
    sse = (FIXTURES / path).read_text()
    first = json.loads(events(sse)[0])
    body = {"model": "tiny-llama", "temperature": 0, "max_tokens": 8, "stream": True}
    if first["object"] == "chat.completion.chunk":
        body["messages"] = [{"role": "user", "content": PROMPTS["short"]}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = PROMPTS["short"]
        path = "/v1/completions"
    if usage:
        body["stream_options"] = {"include_usage": True}
    return {"path": path, "body": body, "sse": sse}


@pytest.mark.parametrize(
    ("name", "usage"),
    [
        ("completion_stream.sse", False),
        ("completion_stream_usage.sse", True),
        ("chat_stream.sse", False),
        ("chat_stream_usage.sse", True),
    ],
)
def test_streams_have_vllms_chunks_in_vllms_order(engine, name, usage):
    case = stream_body(name, usage)
    headers, raw = post_raw(engine.url + case["path"], case["body"])
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert outline(raw) == outline(case["sse"])
    parsed = [json.loads(e) for e in events(raw)[:-1]]
    with_choices = [p for p in parsed if p["choices"]]
    finishes = [p["choices"][0]["finish_reason"] for p in with_choices]
    # One event per token (+ the chat role event); the finish rides on the last token's.
    assert len(with_choices) == 8 + (case["path"] == "/v1/chat/completions")
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert ("usage" in parsed[-1]) is usage


# ---- errors -------------------------------------------------------------------------------


ERRORS = sorted(p.name for p in FIXTURES.glob("error_*.json"))


@pytest.mark.parametrize("name", ERRORS)
def test_errors_have_vllms_status_type_param_and_message(engine, name):
    real = fixture(name)
    request = real["request"]
    body = request["body"]
    if name == "error_prompt_too_long.json":
        body = {**body, "prompt": " ".join(["word"] * PROMPTS["too_long_tokens"])}
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    status, got = http_post(
        engine.url + request["path"], data, headers={"Content-Type": request["content_type"]}
    )
    want = real["body"]["error"]
    assert status == real["status"] == want["code"] == got["error"]["code"]
    assert (got["error"]["type"], got["error"]["param"]) == (want["type"], want["param"])
    assert normalised(got["error"]["message"]) == normalised(want["message"])
    assert shape(got) == shape(real["body"])


def test_max_tokens_beyond_the_room_left_is_clamped_not_refused(engine):
    # vLLM 0.32 refuses only max_tokens > max_model_len; otherwise it stops at the context end.
    prompt = " ".join([VOCAB[0]] * 2040)  # a word of the stand-in's vocabulary: one token
    status, body = http_post(
        engine.url + "/v1/completions", {"prompt": prompt, "max_tokens": 100, "ignore_eos": True}
    )
    assert status == 200 and body["usage"]["completion_tokens"] == 8
    assert body["choices"][0]["finish_reason"] == "length"


# ---- the PD hand-off -------------------------------------------------------------------------


def hand_off(pair, real_prefill: str, stream: bool = False) -> tuple[dict, object]:
    prefill, decode = pair
    request = fixture(real_prefill)["request"]
    status, first = http_post(prefill.url + request["path"], request["body"])
    assert status == 200
    decode_body = {k: v for k, v in request["body"].items() if k != "stream"}
    decode_body.update(max_tokens=16, kv_transfer_params=first["kv_transfer_params"])
    if stream:
        decode_body.update(stream=True, stream_options={"include_usage": True})
        return first, post_raw(decode.url + request["path"], decode_body)[1]
    status, out = http_post(decode.url + request["path"], decode_body)
    assert status == 200
    return first, out


@pytest.mark.parametrize(
    ("prefill_name", "decode_name"),
    [
        ("prefill_response.json", "decode_response.json"),
        ("chat_prefill_response.json", "chat_decode_response.json"),
    ],
)
def test_prefill_params_and_decode_answers_have_vllms_shape(pair, prefill_name, decode_name):
    first, out = hand_off(pair, prefill_name)
    real_first, real_out = fixture(prefill_name)["body"], fixture(decode_name)["body"]
    assert shape(first) == shape(real_first)  # kv_transfer_params: same keys, order, types
    params, real_params = first["kv_transfer_params"], real_first["kv_transfer_params"]
    assert params["remote_request_id"].startswith(first["id"] + "-")
    assert re.sub(r"[0-9a-f]{8}$", "X", params["remote_request_id"][len(first["id"]) :]) == re.sub(
        r"[0-9a-f]{8}$", "X", real_params["remote_request_id"][len(real_first["id"]) :]
    )
    assert {
        k: params[k]
        for k in (
            "do_remote_prefill",
            "do_remote_decode",
            "remote_host",
            "tp_size",
            "transfer_mode",
        )
    } == {
        k: real_params[k]
        for k in (
            "do_remote_prefill",
            "do_remote_decode",
            "remote_host",
            "tp_size",
            "transfer_mode",
        )
    }
    assert params["remote_num_tokens"] == first["usage"]["prompt_tokens"]
    assert shape(out) == shape(real_out)  # the decode: a normal body, kv_transfer_params null
    assert set(out[STAND_IN_ONLY]) == {"kv_wait_s", "xfer_time_s", "ready_to_first_token_s"}
    assert out["usage"]["completion_tokens"] == real_out["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize(
    ("prefill_name", "sse_name"),
    [
        ("prefill_response.json", "decode_stream_usage.sse"),
        ("chat_prefill_response.json", "chat_decode_stream_usage.sse"),
    ],
)
def test_decode_streams_have_vllms_chunks(pair, prefill_name, sse_name):
    _, raw = hand_off(pair, prefill_name, stream=True)
    assert outline(raw) == outline((FIXTURES / sse_name).read_text())


def test_failed_kv_load_is_vllms_bare_500(pair):
    prefill, decode = pair
    real = fixture("decode_bogus_engine_id.json")
    leg = fixture("prefill_response.json")["request"]["body"]["kv_transfer_params"]
    _, first = http_post(
        prefill.url + "/v1/completions",
        {"prompt": PROMPTS["bogus"], "max_tokens": 1, "kv_transfer_params": leg},
    )
    bogus = dict(
        first["kv_transfer_params"],
        remote_engine_id=real["request"]["body"]["kv_transfer_params"]["remote_engine_id"],
    )
    status, got = http_post(
        decode.url + "/v1/completions",
        {"prompt": PROMPTS["bogus"], "max_tokens": 4, "kv_transfer_params": bogus},
    )
    assert status == real["status"] == 500
    assert got == real["body"]


# ---- metrics ---------------------------------------------------------------------------------


def test_colocated_metric_families_are_vllms(engine):
    http_post(engine.url + "/v1/completions", {"prompt": PROMPTS["short"], "max_tokens": 4})
    assert families(engine.metrics()) == real_families("colocated_metrics.txt")


def test_the_process_families_vllm_serves_are_there_too(engine):
    def process_families(text: str) -> dict[str, str]:
        return {
            f.name: f.type
            for f in text_string_to_metric_families(text)
            if f.name.startswith(("process_", "python_"))
        }

    real = process_families((FIXTURES / "colocated_metrics.txt").read_text())
    assert real["process_cpu_seconds"] == "counter"
    assert process_families(engine.metrics()) == real


def test_prefill_and_decode_metric_families_are_vllms(pair):
    hand_off(pair, "prefill_response.json")
    prefill, decode = pair
    assert families(prefill.metrics()) == real_families("prefill_metrics.txt")
    assert families(decode.metrics()) == real_families("decode_metrics.txt")


# ---- headers and small endpoints ---------------------------------------------------------


def test_headers_are_vllms(engine):
    headers, _ = post_raw(engine.url + "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    real = dict(fixture("headers_completion.json")["headers"])
    assert headers["content-type"] == real["content-type"] == "application/json"
    assert headers["vary"] == real["vary"] and "content-length" in headers
    headers, _ = post_raw(
        engine.url + "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream": True}
    )
    real = dict(fixture("headers_completion_stream.json")["headers"])
    assert headers["content-type"] == real["content-type"]
    assert headers["transfer-encoding"] == real["transfer-encoding"] == "chunked"
    assert headers["vary"] == real["vary"] and "content-length" not in headers


def test_health_version_and_models_are_vllms(engine):
    with urllib.request.urlopen(engine.url + "/health", timeout=5) as resp:
        headers = {k.lower(): v for k, v in resp.getheaders()}
        assert resp.status == 200 and resp.read() == b""
    assert headers["content-length"] == "0" and "content-type" not in headers
    assert json.loads(http_get(engine.url + "/version")[1]) == fixture("version.json")["body"]
    models = json.loads(http_get(engine.url + "/v1/models")[1])
    real = fixture("models.json")["body"]
    assert shape(models) == shape(real)
    assert models["data"][0]["id"] == real["data"][0]["id"]
    assert models["data"][0]["max_model_len"] == real["data"][0]["max_model_len"]
