"""The stand-in's vision encoder and its EC connector: where an image request's encoder time
goes, and the embedding records an encoder leaves for the prefills.

An instance with an EC producer config writes one record per image where ECExampleConnector
writes its tensor: `<shared_storage_path>/<mm hash>/encoder_cache.safetensors` (a real, tiny
safetensors file: an `ec_cache` tensor of one BF16 zero per vision token). A consumer that
finds an image's record skips that image's encoder time; one that does not computes it
itself (a producer, too, skips what is stored), and each is counted
(`pdctl_sim_encoder_images_total{source}`). Without any EC config the instance pays the
encoder for every image, as a colocated vLLM does.

Model, stated: images go through the encoder one after another (a lane per instance, FIFO:
a compute-bound encoder gains little from batching), before the request's prefill, and the
encoder does not slow the language model's steps on the same GPU (vLLM runs it inside the
step; the stand-in keeps the two apart).
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client.core import CounterMetricFamily

from simulator.config.encoder import EcSettings
from simulator.model.encoder import mm_hash

RECORD = "encoder_cache.safetensors"  # ECExampleConnector's file name


def record_path(storage: str, key: str) -> Path:
    return Path(storage) / key / RECORD


def record_bytes(key: str, vision_tokens: int) -> bytes:
    """A safetensors file: u64 header length, JSON header, then the tensor's bytes."""
    size = 2 * vision_tokens
    header = {
        "__metadata__": {"mm_hash": key, "producer": "pdctl sim"},
        "ec_cache": {"dtype": "BF16", "shape": [vision_tokens, 1], "data_offsets": [0, size]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(text)) + text + bytes(size)


def write_record(storage: str, key: str, vision_tokens: int) -> None:
    """Atomically: a consumer never reads half a record."""
    path = record_path(storage, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{RECORD}.{os.getpid()}.tmp")
    tmp.write_bytes(record_bytes(key, vision_tokens))
    tmp.replace(path)


class EncoderStage:
    """One instance's vision encoder (a lane on the engine's modelled clock)."""

    def __init__(
        self,
        seconds_per_image: float,
        vision_tokens: int,
        model: str,
        ec: EcSettings | None,
        now: Callable[[], float],
        time_scale: float = 1.0,
    ) -> None:
        self.seconds_per_image, self.vision_tokens = seconds_per_image, vision_tokens
        self.model, self.ec, self.now, self.time_scale = model, ec, now, time_scale
        self.busy_until = 0.0
        self.images = {"computed": 0, "ec_cache_hit": 0}
        self.encoder_seconds = 0.0
        self.records_written = 0

    def split(self, urls: Iterable[str]) -> tuple[list[str], int]:
        """(keys the encoder must compute, how many were found stored). vLLM's scheduler
        asks the EC connector first whatever the role (has_cache_item): a producer too skips
        an image already stored."""
        keys = [mm_hash(self.model, url) for url in urls]
        if self.ec is None:
            return keys, 0
        todo = [k for k in keys if not record_path(self.ec.storage_path, k).is_file()]
        return todo, len(keys) - len(todo)

    def reserve(self, count: int) -> float:
        """Queue `count` images on the lane; the modelled seconds until they are done."""
        now = self.now()
        self.busy_until = max(now, self.busy_until) + count * self.seconds_per_image
        return self.busy_until - now

    async def encode(self, urls: Iterable[str]) -> None:
        """Run the encoder for the images not already stored; leave records if a producer."""
        todo, hits = self.split(urls)
        self.images["ec_cache_hit"] += hits
        if todo:
            wait = self.reserve(len(todo))
            self.images["computed"] += len(todo)
            self.encoder_seconds += len(todo) * self.seconds_per_image
            await asyncio.sleep(wait * self.time_scale)
        if self.ec is not None and self.ec.producer:
            for key in todo:
                write_record(self.ec.storage_path, key, self.vision_tokens)
                self.records_written += 1

    def collect(self) -> Iterable[CounterMetricFamily]:
        """pdctl_sim_* families (a prometheus collector): real vLLM exports none of these."""
        images = CounterMetricFamily(
            "pdctl_sim_encoder_images",
            "Images of requests here by where their embedding came from: computed by this "
            "instance's encoder, or found in the EC connector's store.",
            labels=["source"],
        )
        for source, value in self.images.items():
            images.add_metric([source], value)
        seconds = CounterMetricFamily(
            "pdctl_sim_encoder_seconds", "Modelled seconds this instance's encoder ran."
        )
        seconds.add_metric([], self.encoder_seconds)
        written = CounterMetricFamily(
            "pdctl_sim_ec_records_written", "Embedding records this EC producer stored."
        )
        written.add_metric([], self.records_written)
        return [images, seconds, written]

    @property
    def encode_only(self) -> bool:
        return self.ec is not None and self.ec.encode_only


def encoder_for(settings, now: Callable[[], float]) -> EncoderStage | None:
    """The encoder of an instance playing a multimodal model; None for a text-only one."""
    from domain import profiles
    from simulator.model.encoder import encoder_seconds_per_image

    model = profiles.model(settings.model_profile)
    if not model.is_multimodal:
        return None
    hardware = profiles.hardware(settings.hardware)
    seconds = encoder_seconds_per_image(model, hardware, settings.tensor_parallel_size)
    return EncoderStage(
        seconds,
        model.vision_tokens_per_image,
        settings.served_model_name,
        settings.ec,
        now,
        settings.time_scale,
    )
