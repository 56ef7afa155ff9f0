"""Builders for engine-core tests: timing models, schedulers and workloads."""

from __future__ import annotations

import random

from domain import profiles
from simulator.engine.request import EngineRequest, KVRole
from simulator.engine.scheduler import Scheduler, SchedulerConfig
from simulator.model.timing import TimingModel


def timing(model: str = "qwen3-235b-a22b-fp8", hardware: str = "mi300x", tp: int = 4):
    return TimingModel(profiles.model(model), profiles.hardware(hardware), tp)


def scheduler(
    model: str = "qwen3-235b-a22b-fp8", hardware: str = "mi300x", tp: int = 4, **config
) -> Scheduler:
    return Scheduler(timing(model, hardware, tp), SchedulerConfig(**config))


def prompt(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(4096) for _ in range(length)]


def request(
    rid: str,
    prompt_len: int,
    max_tokens: int,
    at: float = 0.0,
    seed: int | None = None,
    role: KVRole = KVRole.LOCAL,
    kv_ready: bool = False,
    ids: list[int] | None = None,
) -> EngineRequest:
    tokens = ids if ids is not None else prompt(prompt_len, hash(rid) if seed is None else seed)
    return EngineRequest(rid, tokens, max_tokens, at, kv_role=role, kv_ready=kv_ready)


def poisson(
    n: int,
    rate: float,
    prompt_len: int,
    max_tokens: int,
    seed: int = 0,
    role: KVRole = KVRole.LOCAL,
    kv_ready: bool = False,
) -> list[EngineRequest]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        ids = [rng.randrange(4096) for _ in range(prompt_len)]
        out.append(EngineRequest(f"r{i}", ids, max_tokens, t, kv_role=role, kv_ready=kv_ready))
    return out
