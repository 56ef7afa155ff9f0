"""`pdctl serve` as a real process on a free loopback port, spoken to over real HTTP."""

from __future__ import annotations

import http.client
import json
import sqlite3
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from harness.processes import (
    ROOT,
    Process,
    free_port,
    http_get,
    http_post,
    metric_value,
    port_range,
)
from tests.migrations.test_migrations import head
from tests.specs import nixl_1p1d

pytestmark = pytest.mark.e2e
TOKENS = {"PDCTL_OPERATOR_TOKENS": "alice:op-secret", "PDCTL_VIEWER_TOKENS": "bob:view-secret"}


def serve(tmp_path: Path, db: Path, env: dict | None = None) -> Process:
    port = free_port()
    return Process(
        ["serve", "--port", str(port), "--db", str(db)],
        port,
        env={
            "PDCTL_PORT_RANGE": port_range(),
            "PDCTL_RUNTIME_DIR": str(tmp_path / "runs"),
            **(env or {}),
        },
        log_path=tmp_path / f"serve-{port}.log",
    ).wait_healthy()


def get(url: str) -> tuple[int, bytes]:
    return http_get(url, timeout=30)  # generous: CI machines may be loaded


def put(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_serve_migrates_a_fresh_file_and_keeps_state_across_restarts(tmp_path: Path) -> None:
    db = tmp_path / "state" / "pdctl.db"
    db.parent.mkdir()
    server = serve(tmp_path, db)
    try:
        status, created = http_post(server.url + "/api/deployments", nixl_1p1d())
        assert status == 201, created
        assert put(server.url + "/api/deployments/pd", nixl_1p1d(time_scale=2.0))[0] == 200
        assert Path(f"{db}-wal").exists()  # WAL journal
    finally:
        server.stop()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (head(),)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    again = serve(tmp_path, db)
    try:
        status, body = get(again.url + "/api/deployments/pd")
        deployment = json.loads(body)
        assert (status, deployment["revision"]) == (200, 2)
        assert deployment["ports"] == created["ports"]
        kinds = [e["kind"] for e in json.loads(get(again.url + "/api/events")[1])]
        assert kinds == ["deployment.updated", "deployment.created"]
    finally:
        again.stop()


def post_unsent(url: str, length: int, headers: dict) -> int:
    """POST announcing `length` bytes without sending them: the status of the answer."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest("POST", parts.path)
        for name, value in {
            **headers,
            "Content-Type": "application/json",
            "Content-Length": str(length),
        }.items():
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_serve_with_tokens_and_every_error_over_real_http(tmp_path: Path) -> None:
    server = serve(tmp_path, tmp_path / "pdctl.db", env=TOKENS)
    operator = {"Authorization": "Bearer op-secret"}
    deployments = server.url + "/api/deployments"
    try:
        assert get(server.url + "/health")[0] == 200
        assert http_post(deployments, nixl_1p1d())[0] == 401
        assert (
            http_post(deployments, nixl_1p1d(), headers={"Authorization": "Bearer view-secret"})[0]
            == 403
        )
        assert http_post(deployments, nixl_1p1d(), headers=operator)[0] == 201
        assert http_post(deployments, nixl_1p1d(), headers=operator) == (
            409,
            {"detail": "deployment 'pd' already exists"},
        )
        status, body = http_post(deployments, nixl_1p1d("x", connector=None), headers=operator)
        assert (status, body["detail"][0]["loc"]) == (422, ["body", "connector"])
        assert post_unsent(deployments, 2 << 20, operator) == 413
        assert get(deployments + "/nope")[0] == 401
        assert get(server.url + "/docs")[0] == 401  # the description needs a token too
        assert get(server.url + "/openapi.json")[0] == 401
        request = urllib.request.Request(server.url + "/openapi.json", headers=operator)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert b"/api/deployments/{name}/diff" in response.read()
        assert get(server.url + "/metrics")[0] == 401
        request = urllib.request.Request(server.url + "/metrics", headers=operator)
        with urllib.request.urlopen(request, timeout=30) as response:
            assert metric_value(response.read().decode(), "pdctl_deployments") == 1
        request = urllib.request.Request(deployments + "/nope", headers=operator)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        err.value.close()
        assert err.value.code == 404
    finally:
        server.stop()


def test_serve_refuses_to_bind_beyond_loopback_without_tokens(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "serve",
            "--host",
            "0.0.0.0",
            "--db",
            str(tmp_path / "pdctl.db"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert done.returncode == 2
    assert "refusing to bind 0.0.0.0 without tokens" in done.stderr
    assert "--host" in done.stderr
    assert not (tmp_path / "pdctl.db").exists()  # refused before touching anything
