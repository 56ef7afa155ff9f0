"""`pdctl sim --render` as a real process beside a real `pdctl sim`: render, generate on the
token ids, derender; the text is the engine's own for the text prompt. /metrics counts the
requests and carries the process's CPU."""

from __future__ import annotations

import pytest

from domain.workload import tokenizer
from harness.processes import http_get, http_post, metric_value, running, sim

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tiers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("render")
    render, engine = sim(tmp, "render", "tiny", "--render"), sim(tmp, "engine", "tiny")
    with running(render, engine):
        yield render, engine


def post(url: str, body: dict) -> tuple[int, dict]:
    return http_post(url, body)


def test_render_generate_derender_is_the_engines_text(tiers) -> None:
    render, engine = tiers
    asked = {"model": "tiny", "prompt": "one two three four", "max_tokens": 6}
    status, [made] = post(render.url + "/v1/completions/render", asked)
    assert status == 200 and made["token_ids"]
    _, direct = post(engine.url + "/v1/completions", asked)
    _, on_ids = post(engine.url + "/v1/completions", {**asked, "prompt": made["token_ids"]})
    assert on_ids["choices"][0]["text"] == direct["choices"][0]["text"]
    ids = tokenizer.encode(direct["choices"][0]["text"])
    response = {"request_id": made["request_id"], "choices": [{"index": 0, "token_ids": ids}]}
    status, back = post(
        render.url + "/v1/completions/derender",
        {"model": "tiny", "generate_responses": [response], "prompt_tokens": [4]},
    )
    assert status == 200
    assert back["choices"][0]["text"] == direct["choices"][0]["text"]
    assert back["usage"]["prompt_tokens"] == 4


def test_errors_are_vllms_shape(tiers) -> None:
    render, _ = tiers
    status, body = post(render.url + "/v1/completions/render", {"model": "nope", "prompt": "a"})
    assert status == 404 and body["error"]["param"] == "model"
    status, body = post(render.url + "/v1/chat/completions/derender", {"generate_response": None})
    assert status == 400 and body["error"]["param"] == "generate_response"


def test_health_and_metrics(tiers) -> None:
    render, _ = tiers
    assert http_get(render.url + "/health")[0] == 200
    text = http_get(render.url + "/metrics")[1].decode()
    assert metric_value(text, "process_cpu_seconds_total") > 0
    handler = "/v1/completions/render"
    assert metric_value(text, "http_requests_total", handler=handler, status="2xx") >= 1
    assert metric_value(text, "http_requests_total", handler=handler, status="4xx") >= 1
