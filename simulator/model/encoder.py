"""Pure: the stand-in's vision encoder. What an image costs (a roofline on compute), which
chat content parts are images, the key an image's embedding is stored under, and the prompt
tokens an image becomes.

Encoder time per image = vision tokens per image x encoder FLOPs per vision token / (peak
BF16 FLOP/s x the hardware's compute efficiency x TP). The encoder is compute-bound: its
weights (0.68 GB for Qwen2.5-VL-7B's ViT) are read once per batch of patches, so the
bandwidth term is left out. The model figures are the profile's (derived from the model's
config.json in domain/profiles/models/*.toml), the hardware's are the datasheet numbers with
their stated efficiencies (domain/profiles/hardware/*.toml). Qwen2.5-VL-7B on one H100:
1296 x 5.13 GFLOP / (989.4 TFLOP/s x 0.80) = 8.4 ms per 1008 x 1008 image.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from domain.profiles import HardwareProfile, ModelProfile
from domain.workload.tokenizer import VOCAB_SIZE

# The content part types vLLM's EPD example proxy sends to an encoder; the stand-in models
# images only (audio parts are passed over as text-free parts, as before).
IMAGE_PART = "image_url"


def encoder_seconds_per_image(model: ModelProfile, hardware: HardwareProfile, tp: int) -> float:
    """Modelled seconds of the vision encoder for one image; 0 for a text-only model."""
    if not model.is_multimodal:
        return 0.0
    flops = model.vision_tokens_per_image * model.vision_flops_per_token
    rate = hardware.peak_flops("bf16") * hardware.compute_eff("bf16") * tp
    return flops / rate


def image_url(part: Any) -> str | None:
    """The URL (or data: URI) of a chat content part that is an image, else None. Both
    OpenAI's `{"image_url": {"url": ...}}` and the bare-string form vLLM accepts."""
    if not isinstance(part, dict) or part.get("type") != IMAGE_PART:
        return None
    value = part.get(IMAGE_PART)
    if isinstance(value, dict):
        value = value.get("url")
    return value if isinstance(value, str) and value else None


def image_urls(messages: Any) -> list[str]:
    """Every image in a chat request's messages, in order."""
    urls: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if (url := image_url(part)) is not None:
                urls.append(url)
    return urls


def mm_hash(model: str, url: str) -> str:
    """The key an image's embedding is stored under. vLLM hashes the decoded pixels with the
    model id; the stand-in never fetches an image, so it hashes the model and the URL (a
    data: URI is the image's bytes, so there it is keyed by content as vLLM's is)."""
    return hashlib.sha256(f"{model}\0{url}".encode()).hexdigest()


def placeholder_ids(key: str, count: int) -> list[int]:
    """The prompt tokens an image becomes: `count` ids seeded by its key, so two images never
    share a prefix-cache block (vLLM adds the mm hash to the block hash for the same reason)."""
    rng = random.Random(key)
    return [rng.randrange(VOCAB_SIZE) for _ in range(count)]
