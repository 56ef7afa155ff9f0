"""An app on a real SQLite file in tmp_path. The file is a copy of one migrated to head once
per session (tests/migrations and the `pdctl serve` tests cover migrating on start)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from harness.processes import worker_share
from state import migrate
from web.app import create_app
from web.settings import Settings

OPERATOR, VIEWER = "alice:op-secret", "bob:view-secret"
AS_OPERATOR = {"Authorization": "Bearer op-secret"}
AS_VIEWER = {"Authorization": "Bearer view-secret"}
MakeClient = Callable[..., TestClient]
PORTS = worker_share(41000, 42000)  # the instances this worker's apps start


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("template") / "pdctl.db"
    migrate.upgrade(db)
    return db


def _clients(folder: Path, template: Path) -> Iterator[MakeClient]:
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        db = folder / f"pdctl-{len(clients)}.db"
        shutil.copy(template, db)
        settings = Settings(
            **{
                "db": db,
                "port_range": (PORTS[0], PORTS[1] - 1),
                "runtime_dir": folder / f"runs-{len(clients)}",
                "migrate_on_start": False,
                # The name TestClient sends as Host (web/security/hosts.py refuses it otherwise).
                "allowed_hosts": ["testserver"],
                **overrides,
            }
        )
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def make_client(tmp_path: Path, migrated: Path) -> Iterator[MakeClient]:
    yield from _clients(tmp_path, migrated)


@pytest.fixture(scope="module")
def make_module_client(
    tmp_path_factory: pytest.TempPathFactory, migrated: Path
) -> Iterator[MakeClient]:
    """For modules whose tests only read: one app for all of them."""
    yield from _clients(tmp_path_factory.mktemp("module"), migrated)


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    return make_client()


@pytest.fixture
def secured(make_client: MakeClient) -> TestClient:
    return make_client(operator_tokens=[OPERATOR], viewer_tokens=[VIEWER])


@pytest.fixture
def pd_and_solo(make_client: MakeClient) -> TestClient:
    """A plane without a controller holding a NIXL pair "pd" and a colocated "solo"."""
    from tests.specs import colocated, nixl_1p1d

    client = make_client(controller=False)
    assert client.post("/api/deployments", json=nixl_1p1d()).status_code == 201
    assert client.post("/api/deployments", json=colocated()).status_code == 201
    return client
