"""/metrics: the stored state in Prometheus text, read at scrape time."""

from __future__ import annotations

from fastapi.testclient import TestClient

from harness.processes import metric_value
from tests.specs import colocated, nixl_1p1d
from tests.web.conftest import MakeClient


def test_metrics_count_deployments_revisions_and_events(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    client.post("/api/deployments", json=colocated())
    client.put("/api/deployments/pd", json=nixl_1p1d(time_scale=2.0))
    client.delete("/api/deployments/solo")
    response = client.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert metric_value(text, "pdctl_deployments") == 1
    assert metric_value(text, "pdctl_revisions") == 2
    assert metric_value(text, "pdctl_events_total", kind="deployment.created") == 2
    assert metric_value(text, "pdctl_events_total", kind="deployment.deleted") == 1


def test_each_app_has_its_own_registry(make_client: MakeClient) -> None:
    a, b = make_client(), make_client()
    a.post("/api/deployments", json=nixl_1p1d())
    assert metric_value(a.get("/metrics").text, "pdctl_deployments") == 1
    assert metric_value(b.get("/metrics").text, "pdctl_deployments") == 0
