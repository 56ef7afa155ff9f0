"""Arrival schedules: offered rate and burstiness as vLLM's bench draws them."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from domain.workload.arrivals import arrival_times


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times], times, strict=False)]


def test_poisson_arrivals_hold_the_offered_rate() -> None:
    times = arrival_times(20_000, 8.0, 1.0, random.Random(1))
    assert times == sorted(times)
    assert 20_000 / times[-1] == pytest.approx(8.0, rel=0.03)


def test_poisson_gaps_have_coefficient_of_variation_one() -> None:
    gaps = _gaps(arrival_times(20_000, 4.0, 1.0, random.Random(2)))
    cv2 = statistics.pvariance(gaps) / statistics.fmean(gaps) ** 2
    assert cv2 == pytest.approx(1.0, rel=0.06)


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 8.0])
def test_gamma_gaps_keep_the_rate_and_scale_variance_by_burstiness(burstiness: float) -> None:
    gaps = _gaps(arrival_times(20_000, 5.0, burstiness, random.Random(3)))
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 5.0, rel=0.05)
    # gamma(shape=k, scale=1/(rate*k)): variance = 1 / (rate^2 * k), so CV^2 = 1 / k
    assert statistics.pvariance(gaps) / mean**2 == pytest.approx(1 / burstiness, rel=0.1)


def test_infinite_rate_offers_everything_at_once() -> None:
    assert arrival_times(5, math.inf, 1.0, random.Random(0)) == [0.0] * 5


def test_same_seed_same_schedule() -> None:
    assert arrival_times(50, 3.0, 0.5, random.Random(7)) == arrival_times(
        50, 3.0, 0.5, random.Random(7)
    )


def test_no_requests_no_arrivals() -> None:
    assert arrival_times(0, 1.0, 1.0, random.Random(0)) == []


@pytest.mark.parametrize(("rate", "burstiness"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0)])
def test_rejects_non_positive_rate_or_burstiness(rate: float, burstiness: float) -> None:
    with pytest.raises(ValueError):
        arrival_times(3, rate, burstiness, random.Random(0))
