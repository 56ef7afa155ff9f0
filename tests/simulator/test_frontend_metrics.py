"""The modelled API server CPU as a scraper reads it: `process_cpu_seconds_total` of a real
`pdctl sim` (and `pdctl sim --render`) rises by the charged cost per request, per text prompt
token and per output token, and nothing per token for a prompt sent as token ids."""

from __future__ import annotations

import time

import pytest

from harness.processes import http_get, http_post, metric_value, running, sim

pytestmark = pytest.mark.e2e

# 1 ms per request, 1 ms per text prompt token, 1 ms per output token: big against the
# stand-in's own noise, exact in the counter.
COST = "1,1000,1000"
TEN_WORDS = "one two six ten red sun sky sea map key"  # a token each, by any count


@pytest.fixture(scope="module")
def procs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("frontend")
    engine = sim(tmp, "engine", "tiny", "--frontend-cost", COST)
    render = sim(tmp, "render", "tiny", "--render", env={"PDCTL_SIM_FRONTEND_COST": COST})
    with running(engine, render):
        yield engine, render


def cpu(url: str) -> float:
    return metric_value(http_get(url + "/metrics")[1].decode(), "process_cpu_seconds_total")


def settled_rise(url: str, before: float, expected: float) -> float:
    """The counter's rise once the one modelled core has done the charged work."""
    deadline = time.monotonic() + 5.0
    while True:
        rise = cpu(url) - before
        if rise >= expected - 1e-6 or time.monotonic() > deadline:
            return rise
        time.sleep(0.02)


def complete(url: str, prompt: str | list[int], max_tokens: int) -> dict:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    status, out = http_post(url + "/v1/completions", body)
    assert status == 200, out
    return out


def test_a_text_prompt_costs_its_tokens_and_its_output(procs) -> None:
    engine, _ = procs
    before = cpu(engine.url)
    complete(engine.url, TEN_WORDS, 5)
    assert settled_rise(engine.url, before, 0.016) == pytest.approx(0.016, abs=1e-6)


def test_a_token_id_prompt_costs_no_tokenizing(procs) -> None:
    engine, _ = procs
    before = cpu(engine.url)
    complete(engine.url, list(range(100, 110)), 5)
    assert settled_rise(engine.url, before, 0.006) == pytest.approx(0.006, abs=1e-6)


def test_a_refused_request_costs_the_request_only(procs) -> None:
    engine, _ = procs
    before = cpu(engine.url)
    status, _ = http_post(engine.url + "/v1/completions", {"model": "nope", "prompt": "a"})
    assert status == 404
    assert settled_rise(engine.url, before, 0.001) == pytest.approx(0.001, abs=1e-6)


def test_the_render_tier_charges_rendering_not_derendering(procs) -> None:
    _, render = procs
    before = cpu(render.url)
    status, [made] = http_post(
        render.url + "/v1/completions/render", {"model": "tiny", "prompt": TEN_WORDS}
    )
    assert status == 200 and len(made["token_ids"]) == 10
    assert settled_rise(render.url, before, 0.011) == pytest.approx(0.011, abs=1e-6)
    before = cpu(render.url)
    response = {"request_id": made["request_id"], "choices": [{"index": 0, "token_ids": [5]}]}
    status, _ = http_post(
        render.url + "/v1/completions/derender",
        {"model": "tiny", "generate_responses": [response], "prompt_tokens": [10]},
    )
    assert status == 200
    assert settled_rise(render.url, before, 0.001) == pytest.approx(0.001, abs=1e-6)


def test_a_slowed_stand_in_charges_its_frontend_as_slowly(tmp_path) -> None:
    engine = sim(tmp_path, "slowed", "tiny", "--frontend-cost", COST, "--time-scale", "3")
    with running(engine):
        before = cpu(engine.url)
        complete(engine.url, TEN_WORDS, 5)
        assert settled_rise(engine.url, before, 0.048) == pytest.approx(0.048, abs=1e-6)
