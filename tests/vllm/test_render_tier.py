"""A render tier on real vLLM 0.32 (CPU): a colocated vLLM engine and a `vllm launch render`
group, run by the controller, the proxy told of the render tier. Greedy answers through the
proxy (rendered to token ids by vLLM's render server, generated on the ids) equal the engine's
own for the text request, completions and chat, whole and streamed; the render server counts
every request."""

from __future__ import annotations

import openai
import pytest

from harness.processes import http_get, metric_value
from tests.vllm import harness
from tests.vllm.conftest import MAX_TOKENS, REFERENCE_REQUESTS, client, deployed, greedy

pytestmark = pytest.mark.vllm


def streamed(api: openai.OpenAI, model: str, kind: str, seed: int) -> str:
    if kind == "completion":
        chunks = api.completions.create(
            model=model,
            prompt=harness.prompt(seed),
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
        )
        return "".join(c.choices[0].text for c in chunks if c.choices)
    chunks = api.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": harness.prompt(seed)}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_real_render_tier_gives_the_engines_own_answers(plane, vllm_setup) -> None:
    spec = harness.colocated_spec("rendered", vllm_setup.model, vllm_setup.marker)
    spec["groups"].append({"name": "render", "role": "render"})
    with deployed(plane, spec, vllm_setup) as live:
        through = client(live)
        engine = openai.OpenAI(
            base_url=live.urls["colo-0"] + "/v1", api_key="none", timeout=120, max_retries=0
        )
        model = str(vllm_setup.model)
        before = rendered(live.urls["render-0"])
        for kind, seed in REFERENCE_REQUESTS:
            direct = greedy(engine, vllm_setup.model, kind, seed)
            assert greedy(through, vllm_setup.model, kind, seed) == direct, (kind, seed)
            assert streamed(through, model, kind, seed) == direct.text, (kind, seed)
        assert rendered(live.urls["render-0"]) - before == 2 * len(REFERENCE_REQUESTS)


def rendered(url: str) -> float:
    text = http_get(url + "/metrics")[1].decode()
    return sum(
        metric_value(text, "http_requests_total", handler=h, status="2xx")
        for h in ("/v1/completions/render", "/v1/chat/completions/render")
    )
