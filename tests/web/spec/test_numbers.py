"""Non-finite and out-of-range numbers in a spec are 422s naming the field, through the API:
JSON bodies may carry Infinity and NaN (Python's json reads them), and none may be stored."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.specs import edited, nixl_1p1d


def post(client: TestClient, body: dict) -> tuple[int, object]:
    # Sent as text: Infinity and NaN are what a hostile client writes, not valid JSON.
    response = client.post(
        "/api/deployments",
        content=json.dumps(body, allow_nan=True),
        headers={"Content-Type": "application/json"},
    )
    return response.status_code, response.json()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("slo", "ttft_ms"), float("inf")),
        (("slo", "itl_ms"), float("nan")),
        (("slo", "tpot_ms"), float("-inf")),
        (("slo", "ttft_ms"), 1e300),
        (("time_scale",), float("inf")),
        (("proxy", "hold_deadline_s"), float("nan")),
        (("proxy", "prefill_timeout_s"), float("inf")),
        (("kv_connector_extra_config", "ratio"), float("inf")),
    ],
)
def test_a_non_finite_or_huge_number_is_a_422_at_its_field(
    client: TestClient, path: tuple, value: float
) -> None:
    body = edited(nixl_1p1d(slo={}, proxy={}, kv_connector_extra_config={}), path, value)
    status, answer = post(client, body)
    assert status == 422, answer
    assert answer["detail"][0]["loc"][1 : 1 + len(path)] == list(path)
    assert client.get("/api/deployments").json() == []


def test_the_probes_infinite_slo_is_a_422_naming_slo_ttft_ms(client: TestClient) -> None:
    response = client.post(
        "/api/deployments",
        content=json.dumps(nixl_1p1d())[:-1] + ', "slo": {"ttft_ms": Infinity}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    [item] = response.json()["detail"]
    assert item["loc"] == ["body", "slo", "ttft_ms"]
    assert "finite" in item["msg"]
    assert client.get("/").status_code == 200


def test_finite_numbers_in_range_are_stored(client: TestClient) -> None:
    body = nixl_1p1d(slo={"ttft_ms": 3_600_000, "itl_ms": 0.5}, time_scale=1000)
    status, answer = post(client, body)
    assert status == 201, answer
