"""The API server's CPU split into per-request, per-prompt-token and per-output-token parts."""

from __future__ import annotations

import pytest

from benchmarks.frontend.cost import Run, split
from domain.engine.frontend_cost import FrontendCost


def test_three_runs_give_the_parts_they_were_made_of() -> None:
    truth = FrontendCost(base_ms=3.0, prompt_us=4.0, output_us=370.0)
    runs = [Run(p, o, truth.cpu_ms(p, o)) for p, o in ((48, 1), (1444, 1), (48, 128))]
    got = split(*runs)
    assert got.base_ms == pytest.approx(3.0)
    assert got.prompt_us == pytest.approx(4.0)
    assert got.output_us == pytest.approx(370.0)


def test_the_render_share_is_the_prompt_side_of_one_request() -> None:
    cost = FrontendCost(base_ms=3.0, prompt_us=4.0, output_us=370.0)
    assert cost.render_share(8000, 16) == pytest.approx(32 / (3 + 32 + 5.92))
    assert cost.render_share(1000, 256) < 0.05
    assert FrontendCost(0, 0, 0).render_share(100, 10) == 0.0


def test_noise_never_makes_a_part_negative() -> None:
    got = split(Run(48, 1, 4.0), Run(1444, 1, 3.9), Run(48, 128, 50.0))
    assert got.prompt_us == 0.0 and got.output_us > 0


@pytest.mark.parametrize(
    ("runs", "word"),
    [
        ((Run(48, 1, 4), Run(48, 1, 9), Run(48, 128, 50)), "longer prompt"),
        ((Run(48, 1, 4), Run(1444, 1, 9), Run(48, 1, 50)), "longer output"),
    ],
)
def test_runs_that_do_not_differ_where_they_must_are_refused(runs, word) -> None:
    with pytest.raises(ValueError, match=word):
        split(*runs)
