"""The stand-in's modelled start: it says the parts, then keeps its port closed for the modelled
time (x --time-scale x --start-time-scale), as vLLM binds its HTTP port only once its engine is
up (vllm/entrypoints/openai/api_server.py builds the engine client before `serve_http`)."""

from __future__ import annotations

import time

from domain import profiles
from domain.engine.start_time import StartParts, start_parts
from simulator.config.engine import EngineSettings


def modelled_start(settings: EngineSettings) -> StartParts:
    from simulator.server.app import build_scheduler

    model = profiles.model(settings.model_profile)
    tp = settings.tensor_parallel_size
    pool = build_scheduler(settings).pool.num_blocks * settings.block_size
    return start_parts(
        model,
        profiles.hardware(settings.hardware),
        tp,
        settings.start_cache,
        kv_pool_bytes=pool * model.kv_bytes_per_token_per_gpu(tp),
    )


def start_delay_s(settings: EngineSettings, parts: StartParts) -> float:
    return parts.total_s * settings.time_scale * settings.start_time_scale


def wait_modelled_start(settings: EngineSettings, sleep=time.sleep) -> float:
    """Print the modelled start and wait its scaled time; returns the seconds waited."""
    parts = modelled_start(settings)
    delay = start_delay_s(settings, parts)
    print(
        f"pdctl sim: modelled start {parts.describe()}; port opens after {delay:.2f} s "
        f"(start time scale {settings.start_time_scale:g})",
        flush=True,
    )
    if delay > 0:
        sleep(delay)
    return delay
