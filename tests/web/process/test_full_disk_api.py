"""A full disk under the API is a 507 saying so, in JSON, htmx and page alike; never a bare
500 "Internal Server Error" (issue 39, weak 8). The disk is filled by SQLite itself."""

from __future__ import annotations

import errno

from fastapi.testclient import TestClient

from tests.specs import nixl_1p1d
from tests.state.test_full_disk import disk_full
from tests.web.conftest import MakeClient
from web.database.faults import classify


def test_writes_on_a_full_disk_are_507_naming_it(make_client: MakeClient) -> None:
    client: TestClient = make_client()
    engine = client.app.state.store.engine
    assert client.post("/api/deployments", json=nixl_1p1d("a")).status_code == 201
    with disk_full(engine):
        created = 0
        for i in range(30):  # until the pages left run out
            response = client.post("/api/deployments", json=nixl_1p1d(f"b{i}"))
            if response.status_code == 201:
                created += 1
                continue
            assert response.status_code == 507, response.text
            assert "disk is full" in response.json()["detail"]
            break
        else:
            raise AssertionError("the capped file took 30 deployments")
        page = client.post("/api/deployments", json=nixl_1p1d("c"), headers={"Accept": "text/html"})
        assert page.status_code == 507 and "disk is full" in page.text
        assert client.get("/api/deployments").status_code == 200  # reads still work
    assert client.post("/api/deployments", json=nixl_1p1d("d")).status_code == 201


def test_only_the_storage_s_own_failures_are_classified() -> None:
    assert classify(OSError(errno.ENOSPC, "No space left on device")).status == 507
    assert classify(OSError(errno.EDQUOT, "Disk quota exceeded")).status == 507
    assert classify(OSError(errno.EACCES, "Permission denied")) is None
    assert classify(ValueError("full")) is None
