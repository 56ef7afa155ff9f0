"""What every handler of the stand-in's app reads: its state (the engine loop, metrics, KV
agent, faults, encoder) under one app key, and vLLM's response headers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from simulator.config.engine import EngineSettings
from simulator.config.faults import Faults
from simulator.engine.wall_clock import EngineLoop
from simulator.kv.transfer import KVTransferAgent
from simulator.metrics.export import EngineMetrics
from simulator.model.frontend_clock import FrontendClock
from simulator.protocol.format import compact_json
from simulator.server.encoder_stage import EncoderStage

if TYPE_CHECKING:
    from simulator.protocol.model_tokenizer import ModelTokenizer

# vLLM's headers (uvicorn, and Vary from its CORS middleware), all but `server`: the stand-in
# keeps aiohttp's there, so that a person can still tell the two apart.
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Vary": "Origin"}
JSON_HEADERS = {"Content-Type": "application/json", "Vary": "Origin"}


@dataclass(slots=True)
class SimState:
    settings: EngineSettings
    engine: EngineLoop
    metrics: EngineMetrics
    registry: CollectorRegistry
    agent: KVTransferAgent | None
    created: int
    fingerprint: str
    faults: Faults | None = None  # only with --enable-fault-injection
    encoder: EncoderStage | None = (
        None  # a multimodal profile's (simulator/server/encoder_stage.py)
    )
    # vLLM's API server CPU, modelled (simulator/model/frontend_clock.py)
    frontend: FrontendClock = field(default_factory=FrontendClock)
    prompt_tokenizer: ModelTokenizer | None = None  # --tokenizer's; None: the estimate


STATE = web.AppKey("state", SimState)


def json_response(obj: object, status: int = 200) -> web.Response:
    return web.Response(body=compact_json(obj).encode(), status=status, headers=JSON_HEADERS)
