"""`pdctl sim --render`: the stand-in render tier, vLLM's `vllm launch render` surface with no
engine and no GPU: /v1/completions/render, /v1/chat/completions/render (OpenAI request ->
token ids), /v1/completions/derender, /v1/chat/completions/derender (token ids -> OpenAI
response, streaming chunks too), /health, /v1/models, /metrics.

/metrics carries what the observer reads of a render tier: the process CPU vLLM's render
process would spend (`process_cpu_seconds_total`, modelled as the engines' stand-ins model
their API servers': simulator/model/frontend_clock.py; rendering is the prompt side, per request
and per text prompt token) and `http_requests_total{handler,method,status}`, the counter
vLLM's API server exports.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from prometheus_client.registry import CollectorRegistry

from domain.engine.frontend_cost import VLLM_API_SERVER, FrontendCost
from simulator.config.engine import EngineSettings
from simulator.metrics.export import ApiServerProcess
from simulator.model.frontend_clock import FrontendClock
from simulator.protocol import format as openai_format
from simulator.protocol import render_format
from simulator.protocol import request as openai_request
from simulator.protocol.request import RequestError, error_body

JSON_HEADERS = {"Content-Type": "application/json", "Vary": "Origin"}
ROUTES = {
    "/v1/completions/render": ("completion", "render"),
    "/v1/chat/completions/render": ("chat", "render"),
    "/v1/completions/derender": ("completion", "derender"),
    "/v1/chat/completions/derender": ("chat", "derender"),
}


@dataclass(frozen=True, slots=True)
class RenderSettings:
    served_model_name: str
    model_profile: str
    max_model_len: int
    host: str = "127.0.0.1"
    port: int = 8100
    frontend_cost: FrontendCost = VLLM_API_SERVER


class RenderMetrics:
    def __init__(self, cost: FrontendCost = VLLM_API_SERVER) -> None:
        self.registry = CollectorRegistry()
        self.frontend = FrontendClock(cost)
        self.registry.register(ApiServerProcess(self.frontend))
        self.requests = Counter(
            "http_requests_total",
            "Requests served, by handler, method and status class.",
            ("handler", "method", "status"),
            registry=self.registry,
        )


SETTINGS = web.AppKey("render_settings", RenderSettings)
METRICS = web.AppKey("render_metrics", RenderMetrics)
CREATED = web.AppKey("render_created", int)


def create_render_app(settings: RenderSettings) -> web.Application:
    app = web.Application(client_max_size=32 * 1024 * 1024)
    metrics = RenderMetrics(settings.frontend_cost)
    app[SETTINGS], app[METRICS], app[CREATED] = settings, metrics, int(time.time())
    app.router.add_get("/health", _health)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/metrics", _metrics)
    for path in ROUTES:
        app.router.add_post(path, _serve)
    return app


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200, headers={"Vary": "Origin"})


async def _models(request: web.Request) -> web.Response:
    s = request.app[SETTINGS]
    body = openai_format.models_body(
        s.served_model_name, s.model_profile, s.max_model_len, request.app[CREATED]
    )
    return _json(body)


async def _metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _serve(request: web.Request) -> web.Response:
    kind, verb = ROUTES[request.path]
    frontend = request.app[METRICS].frontend
    try:
        raw = await request.read()
        out, prompt_tokens = _answer(request.app[SETTINGS], kind, verb, raw, request.content_type)
        response = _json(out)
    except RequestError as err:
        prompt_tokens, response = 0, _json(error_body(err), err.status)
    frontend.request(prompt_tokens)
    status = f"{response.status // 100}xx"
    request.app[METRICS].requests.labels(request.path, "POST", status).inc()
    return response


def _answer(
    s: RenderSettings, kind: str, verb: str, raw: bytes, content_type: str
) -> tuple[object, int]:
    """The answer, and the text prompt tokens it took to make (its modelled CPU)."""
    if verb == "render":
        req = openai_request.parse(kind, raw, content_type, s.served_model_name, s.max_model_len)
        made = render_format.generate_request(req, json.loads(raw))
        tokens = len(req.prompt_token_ids) if req.text_prompt else 0
        return (made if kind == "chat" else [made]), tokens
    try:
        body = json.loads(raw)
    except ValueError:
        raise RequestError("request body is not valid JSON", param="body") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object", param="body")
    model = body.get("model") or s.served_model_name
    if model != s.served_model_name:
        raise RequestError(
            f"The model `{model}` does not exist.",
            status=404,
            param="model",
            err_type="NotFoundError",
        )
    if body.get("stream") is True:
        return render_format.derender_chunk(kind, body, model), 0
    return render_format.derender(kind, body, model), 0


def _json(body: object, status: int = 200) -> web.Response:
    text = openai_format.compact_json(body)
    return web.Response(text=text, status=status, headers=JSON_HEADERS)


def run_render(engine: EngineSettings) -> None:
    """Serve the render tier on the engine's flags (port, host, served name, model length)."""
    from simulator.server.event_loop import use_uvloop

    settings = RenderSettings(
        engine.served_model_name,
        engine.model_profile,
        engine.model_len,
        engine.host,
        engine.port,
        engine.frontend_wall_cost,
    )
    use_uvloop()
    print(
        f"pdctl sim --render: render tier for {settings.served_model_name!r} (no engine) at "
        f"http://{settings.host}:{settings.port}/v1",
        flush=True,
    )
    web.run_app(
        create_render_app(settings),
        host=settings.host,
        port=settings.port,
        print=None,
        access_log=None,
        handle_signals=True,
    )
