"""The stand-in's vision encoder: the roofline per image, image parts and their keys, the
--ec-transfer-config it reads, the records an EC producer leaves, and through the server: an
encoder-only producer, a consumer that finds the records (and one that does not), an instance
without EPD paying the encoder itself, and text-only requests unchanged."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from aiohttp.test_utils import TestClient, TestServer

from domain import profiles
from harness.processes import metric_value
from simulator.config.encoder import (
    EcConfigError,
    EcSettings,
    ec_settings,
    parse_ec_transfer_config,
)
from simulator.flag_settings import settings_from_flags
from simulator.model.encoder import (
    encoder_seconds_per_image,
    image_urls,
    mm_hash,
    placeholder_ids,
)
from simulator.protocol.request import parse
from simulator.server.app import create_app
from simulator.server.encoder_stage import EncoderStage, record_bytes, record_path

VL = "qwen2.5-vl-7b-instruct"
IMAGE = "data:image/png;base64,iVBORw0KGgo="
TEXT_ONLY = {"model": VL, "messages": [{"role": "user", "content": "hi"}]}


def test_qwen_vl_encodes_one_reference_image_in_8_ms_on_an_h100():
    seconds = encoder_seconds_per_image(profiles.model(VL), profiles.hardware("h100"), 1)
    assert seconds == pytest.approx(1296 * 5.13e9 / (989.4e12 * 0.80))
    assert 0.0083 < seconds < 0.0085
    half = encoder_seconds_per_image(profiles.model(VL), profiles.hardware("h100"), 2)
    assert half == pytest.approx(seconds / 2)
    assert encoder_seconds_per_image(profiles.model("tiny"), profiles.hardware("cpu"), 1) == 0


def test_image_parts_in_both_shapes_and_nothing_else():
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": IMAGE}},
                {"type": "image_url", "image_url": "http://example.invalid/a.png"},
                {"type": "input_audio", "input_audio": {"data": "x"}},
                {"type": "image_url", "image_url": {}},
            ],
        },
    ]
    assert image_urls(messages) == [IMAGE, "http://example.invalid/a.png"]
    assert image_urls("nope") == []


def test_keys_and_placeholders_are_per_model_and_image():
    assert mm_hash(VL, IMAGE) == mm_hash(VL, IMAGE) != mm_hash("other", IMAGE)
    a, b = placeholder_ids(mm_hash(VL, "a"), 64), placeholder_ids(mm_hash(VL, "b"), 64)
    assert len(a) == 64 and a != b and a == placeholder_ids(mm_hash(VL, "a"), 64)


def _chat(*urls: str, text: str = "describe it") -> dict:
    parts = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"model": VL, "messages": [{"role": "user", "content": parts}], "max_tokens": 4}


def test_an_image_becomes_its_vision_tokens_in_the_prompt_only_for_a_multimodal_model():
    raw = json.dumps(_chat(IMAGE, "http://x.invalid/b.png")).encode()
    with_images = parse("chat", raw, "application/json", VL, 32768, vision_tokens=1296)
    text_only = parse("chat", raw, "application/json", VL, 32768)
    assert with_images.images == (IMAGE, "http://x.invalid/b.png")
    assert len(with_images.prompt_token_ids) == len(text_only.prompt_token_ids) + 2 * 1296
    assert text_only.images == ()


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("{", "not JSON"),
        ("[]", "JSON object"),
        ('{"ec_connector": "ECExampleConnector"}', "ec_role must be one of"),
        ('{"ec_connector": "ECExampleConnector", "ec_role": "kv_producer"}', "ec_role"),
        ('{"ec_connector": "ECMooncakeConnector", "ec_role": "ec_producer"}', "carries only"),
        (
            '{"ec_connector": "ECExampleConnector", "ec_role": "ec_consumer", '
            '"ec_connector_extra_config": []}',
            "JSON object",
        ),
        (
            '{"ec_connector": "ECExampleConnector", "ec_role": "ec_consumer", '
            '"ec_connector_extra_config": {"shared_storage_path": 3}}',
            "must be a path",
        ),
    ],
)
def test_the_stand_in_refuses_what_vllm_would(text, phrase):
    with pytest.raises(EcConfigError, match=phrase):
        parse_ec_transfer_config(text)


def test_roles_defaults_and_an_encoder_of_a_text_only_model():
    both = parse_ec_transfer_config('{"ec_connector": "ECExampleConnector", "ec_role": "ec_both"}')
    assert both == EcSettings("ECExampleConnector", "ec_both", "/tmp")
    assert both.producer and both.consumer and not both.encode_only
    assert parse_ec_transfer_config('{"ec_role": "ec_producer"}') is None
    with pytest.raises(EcConfigError, match="requires a multimodal model"):
        ec_settings('{"ec_connector": "ECExampleConnector", "ec_role": "ec_producer"}', "tiny")


def test_a_record_is_a_safetensors_file_with_one_bf16_per_vision_token():
    data = record_bytes("k", 1296)
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    assert length % 8 == 0 and header["ec_cache"]["shape"] == [1296, 1]
    assert len(data) == 8 + length + header["ec_cache"]["data_offsets"][1] == 8 + length + 2592


def test_the_lane_queues_images_one_after_another():
    clock = [10.0]
    stage = EncoderStage(0.5, 16, VL, None, lambda: clock[0])
    assert stage.reserve(2) == 1.0
    assert stage.reserve(1) == 1.5  # behind the first two
    clock[0] = 20.0
    assert stage.reserve(1) == 0.5  # idle again


def _ec(role: str, path) -> str:
    return json.dumps(
        {
            "ec_connector": "ECExampleConnector",
            "ec_role": role,
            "ec_connector_extra_config": {"shared_storage_path": str(path)},
        }
    )


def _app(ec: str | None = None):
    settings = settings_from_flags(
        model=VL,
        host="127.0.0.1",
        port=8100,
        served=None,
        model_profile=None,
        hardware="h100",
        tp=1,
        max_num_seqs=None,
        max_num_batched_tokens=None,
        block_size=None,
        max_model_len=8192,
        prefix=None,
        gpu_util=0.9,
        blocks=None,
        kv_transfer_config=None,
        time_scale=1.0,
        kv_link_gbps=None,
        kv_wire_scale=1 / 1024,
        heartbeat_s=3.0,
    )
    from dataclasses import replace

    return create_app(replace(settings, ec=ec_settings(ec, VL), log_stats_interval_s=None))


async def _serve(app, bodies):
    async with TestClient(TestServer(app)) as client:
        answers = []
        for body in bodies:
            response = await client.post("/v1/chat/completions", json=body)
            answers.append((response.status, await response.json()))
        metrics = await (await client.get("/metrics")).text()
    return answers, metrics


def _images(metrics: str, source: str) -> float:
    return metric_value(metrics, "pdctl_sim_encoder_images_total", source=source)


def test_producer_stores_and_consumer_skips_what_it_finds(tmp_path):
    url = "http://x.invalid/cat.png"
    [(status, body)], produced = asyncio.run(
        _serve(_app(_ec("ec_producer", tmp_path)), [_chat(url)])
    )
    # vLLM 0.32's encoder-only instance stops once the prompt is consumed: no token.
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 0 and body["usage"]["prompt_tokens"] > 1296
    assert _images(produced, "computed") == 1
    assert record_path(str(tmp_path), mm_hash(VL, url)).is_file()
    other = "http://x.invalid/dog.png"
    answers, consumed = asyncio.run(_serve(_app(_ec("ec_consumer", tmp_path)), [_chat(url, other)]))
    assert answers[0][0] == 200 and answers[0][1]["usage"]["completion_tokens"] == 4
    assert _images(consumed, "ec_cache_hit") == 1 and _images(consumed, "computed") == 1
    assert metric_value(consumed, "pdctl_sim_ec_records_written_total") == 0


def test_without_epd_the_instance_pays_every_image_and_text_is_unchanged():
    answers, metrics = asyncio.run(
        _serve(
            _app(),
            [
                _chat("a", "b"),
                {"model": VL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            ],
        )
    )
    assert [status for status, _ in answers] == [200, 200]
    assert _images(metrics, "computed") == 2
    seconds = encoder_seconds_per_image(profiles.model(VL), profiles.hardware("h100"), 1)
    assert metric_value(metrics, "pdctl_sim_encoder_seconds_total") == pytest.approx(2 * seconds)
