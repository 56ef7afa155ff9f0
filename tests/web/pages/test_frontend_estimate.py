"""The render tier proposal's estimate: the prompt side's share of real vLLM's API-server CPU
at the live workload (domain/engine/frontend_cost.py), and the busiest frontend after the tier."""

from __future__ import annotations

import re

import pytest

from domain.engine.frontend_cost import VLLM_API_SERVER, FrontendCost
from services.proposal_forecast import frontend_estimate


def after_cores(text: str) -> float:
    return float(re.search(r"to about ([0-9.]+) cores", text).group(1))


def test_long_prompts_and_short_answers_are_mostly_prompt_side() -> None:
    text = frontend_estimate(
        {"prompt_tokens_mean": 8000, "output_tokens_mean": 16, "frontend_cpu_share": 0.9}
    )
    share = VLLM_API_SERVER.render_share(8000, 16)
    assert 0.7 < share < 0.85 and f"the prompt side is {share:.0%}" in text
    load = VLLM_API_SERVER.render_load_share(8000, 16)  # the prompt side and the request's own
    assert share < load < share + 0.1
    assert after_cores(text) == pytest.approx(0.9 * load, abs=0.006)  # the render instance
    assert "too little" not in text


@pytest.mark.parametrize(("prompt", "output"), [(1000, 256), (256, 1024), (4000, 512)])
def test_chat_like_answers_keep_the_api_server_hot(prompt: int, output: int) -> None:
    text = frontend_estimate(
        {"prompt_tokens_mean": prompt, "output_tokens_mean": output, "frontend_cpu_share": 0.95}
    )
    assert "too little to be worth a restart" in text
    assert after_cores(text) > 0.95 * 0.75  # the engines keep the streaming


def test_without_lengths_it_says_it_cannot_tell() -> None:
    assert "unknown" in frontend_estimate({"frontend_cpu_share": 0.9})
    text = frontend_estimate({"prompt_tokens_mean": 8000, "output_tokens_mean": 16})
    assert "cores" not in text and "the prompt side is" in text


def test_the_split_itself() -> None:
    cost = FrontendCost(base_ms=2.0, prompt_us=3.0, output_us=300.0)
    assert cost.cpu_ms(1000, 10) == pytest.approx(2.0 + 3.0 + 3.0)
    assert cost.render_share(1000, 10) == pytest.approx(3.0 / 8.0)
    assert cost.render_load_share(1000, 10) == pytest.approx(5.0 / 8.0)
    assert cost.scaled(2.0) == FrontendCost(4.0, 6.0, 600.0)
    assert FrontendCost(0, 0, 0).render_load_share(1000, 10) == 0.0


def test_more_render_instances_share_the_prompt_side() -> None:
    signals = {"prompt_tokens_mean": 8000, "output_tokens_mean": 16, "frontend_cpu_share": 0.9}
    load = VLLM_API_SERVER.render_load_share(8000, 16)
    two = frontend_estimate(signals, fronts=1, renders=2)
    assert "with 2 render instance(s)" in two
    assert after_cores(two) == pytest.approx(0.9 * load / 2, abs=0.006)
    # two decodes' requests on one render instance: hotter than either engine was
    crowded = frontend_estimate(signals, fronts=2, renders=1)
    assert after_cores(crowded) == pytest.approx(0.9 * load * 2, abs=0.006)


def test_a_saturated_api_server_is_a_floor() -> None:
    signals = {"prompt_tokens_mean": 8000, "output_tokens_mean": 16, "frontend_cpu_share": 1.0}
    assert "or more: a saturated API server" in frontend_estimate(signals)
    signals["frontend_cpu_share"] = 0.9
    assert "saturated" not in frontend_estimate(signals)
