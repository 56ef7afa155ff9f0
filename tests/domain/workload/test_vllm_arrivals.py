"""`--arrivals vllm`: the arrival times `vllm bench serve --seed S` offers at, without numpy.

The expected values were computed with numpy 2 in the real-vLLM venv, by vLLM's recipe:
np.random.seed(seed); gaps np.random.gamma(burstiness, 1 / (rate * burstiness)); cumulative;
rescaled so the last arrival is at count / rate.
"""

from __future__ import annotations

import math

import pytest

from domain.workload.vllm_arrivals import LegacyGamma, mersenne_twister, vllm_arrival_times


@pytest.mark.parametrize(
    ("count", "rate", "burstiness", "seed", "expected"),
    [
        (5, 6.0, 1.0, 0, [0.15376443334363238, 0.39641258968676735, 0.574781016377467,
                          0.726869741260602, 0.8333333333333334]),
        (4, 2.0, 0.5, 7, [0.014717715881958344, 0.5005164286069319, 0.6826492180856224, 2.0]),
        (4, 10.0, 3.0, 123, [0.035651735756296835, 0.16744866221316976, 0.21929602453142516,
                             0.4]),
    ],
)  # fmt: skip
def test_same_times_as_numpy_gives_vllm(count, rate, burstiness, seed, expected) -> None:
    assert vllm_arrival_times(count, rate, burstiness, seed) == pytest.approx(expected, rel=1e-12)


def test_legacy_gamma_draws_match_numpy() -> None:
    # np.random.seed(0); np.random.gamma(1.0, 0.3) drawn 200 times: the last three
    draws = LegacyGamma(0)
    values = [draws.gamma(1.0, 0.3) for _ in range(200)]
    assert values[-3:] == pytest.approx(
        [0.08805229517693046, 0.017934288192822927, 0.1709692678148806], rel=1e-12
    )
    draws = LegacyGamma(3)  # shape > 1 uses normals, whose spare is kept between draws
    values = [draws.gamma(2.0, 0.3) for _ in range(200)]
    assert values[-3:] == pytest.approx(
        [0.4128148183913834, 0.7175450062376373, 0.3099775483860681], rel=1e-12
    )


def test_mersenne_twister_starts_where_numpy_randomstate_does() -> None:
    # np.random.RandomState(0).random_sample()
    assert mersenne_twister(0).random() == pytest.approx(0.5488135039273248, rel=1e-15)
    with pytest.raises(ValueError, match="seed"):
        mersenne_twister(-1)


def test_last_arrival_is_count_over_rate_and_inf_rate_is_all_at_once() -> None:
    times = vllm_arrival_times(100, 4.0, 1.0, 5)
    assert times[-1] == pytest.approx(25.0)
    assert times == sorted(times)
    assert vllm_arrival_times(3, math.inf, 1.0, 0) == [0.0, 0.0, 0.0]
    assert vllm_arrival_times(4, 2.0, math.inf, 0) == pytest.approx([0.5, 1.0, 1.5, 2.0])
    assert vllm_arrival_times(0, 2.0, 1.0, 0) == []
