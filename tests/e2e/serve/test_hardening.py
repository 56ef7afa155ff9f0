"""A real `pdctl serve` (uvicorn on loopback) against what an outside probe tried (issue 13,
findings 9, 10, 11): forged X-Forwarded-For, a DNS-rebinding-shaped request, slow headers
and bodies on a raw socket, a second control plane on one database, and the database file's
mode."""

from __future__ import annotations

import http.client
import json
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from harness.processes import ROOT, Process, free_port, port_range
from tests.specs import nixl_1p1d

pytestmark = pytest.mark.e2e
TOKENS = {"PDCTL_OPERATOR_TOKENS": "alice:op-secret", "PDCTL_VIEWER_TOKENS": "bob:view-secret"}


def serve(tmp_path: Path, env: dict | None = None, db: Path | None = None) -> Process:
    port = free_port()
    return Process(
        ["serve", "--port", str(port), "--db", str(db or tmp_path / "pdctl.db")],
        port,
        env={
            "PDCTL_PORT_RANGE": port_range(),
            "PDCTL_RUNTIME_DIR": str(tmp_path / "runs"),
            "PDCTL_CONTROLLER": "false",
            **(env or {}),
        },
        log_path=tmp_path / f"serve-{port}.log",
    ).wait_healthy(60)


def request(
    server: Process,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def login(server: Process, token: str, headers: dict | None = None):
    body = urllib.parse.urlencode({"token": token}).encode()
    return request(
        server,
        "POST",
        "/login",
        body,
        {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
    )


def login_cookies(server: Process, token: str) -> str:
    """The Cookie header a browser would send after signing in with `token`."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        body = urllib.parse.urlencode({"token": token})
        conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        response = conn.getresponse()
        response.read()
        assert response.status == 303
        return "; ".join(v.split(";", 1)[0] for v in response.headers.get_all("set-cookie"))
    finally:
        conn.close()


# -- finding 9: the limit is keyed on the socket's peer; a lockout spares a signed-in browser


def test_rotating_x_forwarded_for_does_not_escape_the_limit(tmp_path: Path) -> None:
    server = serve(tmp_path, TOKENS)
    try:
        signed_in = login_cookies(server, "op-secret")  # before anyone guesses
        codes = [
            login(server, f"guess-{i}", {"X-Forwarded-For": f"203.0.113.{i}"})[0]
            for i in range(100)
        ]
        assert codes[:10] == [401] * 10
        assert codes[10:] == [429] * 90
        # the right token is never locked out (issue 39): from a browser or the API
        assert login(server, "op-secret", {"X-Forwarded-For": "198.51.100.7"})[0] == 303
        auth = {"Authorization": "Bearer op-secret"}
        assert request(server, "GET", "/api/events", headers=auth)[0] == 200
        # the operator who signed in before the lockout keeps working, pages and API
        as_browser = {"Cookie": signed_in}
        assert request(server, "GET", "/", headers=as_browser)[0] == 200
        status, _, _ = request(
            server,
            "POST",
            "/api/deployments",
            json.dumps(nixl_1p1d()).encode(),
            {**as_browser, "Content-Type": "application/json"},
        )
        assert status == 201
        assert login(server, "op-secret", as_browser)[0] == 303
        # and a wrong token from that browser is still wrong
        assert login(server, "guess-from-the-browser", as_browser)[0] == 429
    finally:
        server.stop()


def test_a_trusted_proxy_list_makes_x_forwarded_for_the_client(tmp_path: Path) -> None:
    server = serve(tmp_path, {**TOKENS, "PDCTL_FORWARDED_ALLOW_IPS": "127.0.0.1"})
    try:
        codes = {
            login(server, f"guess-{i}", {"X-Forwarded-For": f"203.0.113.{i}"})[0] for i in range(30)
        }
        assert codes == {401}  # each forwarded address has its own count
    finally:
        server.stop()


# -- finding 10: without tokens, only loopback names are answered -----------------------


def test_a_dns_rebinding_request_cannot_create_a_deployment(tmp_path: Path) -> None:
    server = serve(tmp_path)
    try:
        rebind = f"rebind.example:{server.port}"
        status, _, body = request(
            server,
            "POST",
            "/api/deployments",
            json.dumps(nixl_1p1d()).encode(),
            {
                "Host": rebind,
                "Origin": f"http://{rebind}",
                "Sec-Fetch-Site": "same-origin",
                "Content-Type": "application/json",
            },
        )
        assert status == 400
        assert f"Host {rebind} is not a name this control plane answers to" in body.decode()
        assert request(server, "GET", "/", headers={"Host": rebind})[0] == 400
        status, _, listed = request(server, "GET", "/api/deployments")
        assert status == 200 and json.loads(listed) == []
        for host in (f"localhost:{server.port}", f"[::1]:{server.port}"):
            assert request(server, "GET", "/api/deployments", headers={"Host": host})[0] == 200
        assert websocket_close_code(server, rebind) == 4421
    finally:
        server.stop()


def websocket_close_code(server: Process, host: str) -> int:
    """The close code a websocket handshake with this Host gets (raw socket, no client)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            f"GET /ws/deployments/pd HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            f"Origin: http://{host}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < 4:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    head, _, frame = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    assert frame[0] == 0x88, frame  # a close frame
    return int.from_bytes(frame[2:4], "big")


def test_allowed_hosts_are_settable(tmp_path: Path) -> None:
    server = serve(tmp_path, {"PDCTL_ALLOWED_HOSTS": "pdctl.internal"})
    try:
        host = {"Host": f"pdctl.internal:{server.port}"}
        assert request(server, "GET", "/api/deployments", headers=host)[0] == 200
        assert request(server, "GET", "/api/deployments", headers={"Host": "x.example"})[0] == 400
    finally:
        server.stop()


# -- finding 11: read deadlines, one control plane per database, a private database file --


def closed_after(sock: socket.socket, trickle: list[bytes], every: float) -> float:
    """Send `trickle` one piece every `every` seconds until the server closes the
    connection; the seconds that took (inf if it never did)."""
    start = time.monotonic()
    for piece in trickle:
        try:
            sock.sendall(piece)
        except OSError:
            return time.monotonic() - start
        sock.settimeout(every)
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - start
    return float("inf")


def test_slow_headers_and_slow_bodies_are_cut_off(tmp_path: Path) -> None:
    server = serve(tmp_path, {"PDCTL_HEADER_TIMEOUT_S": "2", "PDCTL_BODY_TIMEOUT_S": "2"})
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            head = [b"GET /health HTTP/1.1\r\n"] + [b"X-Slow-%d: 1\r\n" % i for i in range(20)]
            took = closed_after(sock, head, every=0.5)
        assert 1.5 <= took <= 5, took
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            start = [
                b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n"
            ]
            took = closed_after(sock, start + [b"t"] * 40, every=0.25)
        assert took <= 5, took
        # a client that sends its request at once is served as before, keep-alive too
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for _ in range(2):
            conn.request("GET", "/health")
            assert conn.getresponse().read() and True
        conn.close()
    finally:
        server.stop()


def test_a_second_serve_on_one_database_is_refused_naming_db(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    first = serve(tmp_path, db=db)
    try:
        second = subprocess.run(
            [sys.executable, str(ROOT / "pdctl.py"), "serve", "--port", str(free_port())],
            cwd=ROOT,
            env={
                **__import__("os").environ,
                "PDCTL_DB": str(db),
                "PDCTL_PORT_RANGE": port_range(),
                "PDCTL_RUNTIME_DIR": str(tmp_path / "runs2"),
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"--db {db}" in lines[0], second.stderr
        assert f"pid {first.proc.pid}" in lines[0]
        assert request(first, "GET", "/health")[0] == 200  # the first one is untouched
    finally:
        first.stop()
    serve(tmp_path, db=db).stop()  # the lock goes with the process


def test_the_database_and_its_wal_are_private(tmp_path: Path) -> None:
    server = serve(tmp_path)
    try:
        request(
            server,
            "POST",
            "/api/deployments",
            json.dumps(nixl_1p1d()).encode(),
            {"Content-Type": "application/json"},
        )
        files = [tmp_path / "pdctl.db", tmp_path / "pdctl.db-wal", tmp_path / "pdctl.db-shm"]
        for file in files:
            assert file.exists(), file
            assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    finally:
        server.stop()
