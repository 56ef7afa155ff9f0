"""The CLI's bearer token never leaves the origin it was given for: a redirect to another
host, port or scheme is followed without it; one on the same origin keeps it (issue 39,
weak 6). Real HTTP servers on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from terminal.client import ApiClient
from terminal.config import Target

TOKEN = "operator-secret-token"


class Recorder(BaseHTTPRequestHandler):
    """Redirects /go?to=URL&code=N there; answers anything else with the headers it got."""

    seen: list[tuple[str, str | None]]

    def _answer(self) -> None:
        from urllib.parse import parse_qs, urlsplit

        parts = urlsplit(self.path)
        if parts.path == "/go":
            query = parse_qs(parts.query)
            self.send_response(int(query["code"][0]))
            self.send_header("Location", query["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.seen.append((parts.path, self.headers.get("Authorization")))
        body = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def serve(host: str) -> tuple[ThreadingHTTPServer, list]:
    seen: list = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def servers() -> Iterator[tuple[str, list, str, list]]:
    home, home_seen = serve("127.0.0.1")
    other, other_seen = serve("127.0.0.2")  # another host on loopback
    try:
        yield (
            f"http://127.0.0.1:{home.server_port}",
            home_seen,
            f"http://127.0.0.2:{other.server_port}",
            other_seen,
        )
    finally:
        for server in (home, other):
            server.shutdown()
            server.server_close()


# urllib follows no 307/308 for a POST (it raises the 3xx): nothing to carry there.
@pytest.mark.parametrize(
    ("method", "code"),
    [*(("GET", c) for c in (301, 302, 303, 307, 308)), *(("POST", c) for c in (301, 302, 303))],
)
def test_a_redirect_to_another_host_never_carries_the_token(servers, code, method) -> None:
    home, _, other, other_seen = servers
    client = ApiClient(Target(home, TOKEN))
    body = {"x": 1} if method == "POST" else None
    client.call(method, "/go", body, query={"to": f"{other}/api/x", "code": code})
    assert other_seen and all(auth is None for _, auth in other_seen)


def test_another_port_or_scheme_on_the_same_host_is_another_origin(servers) -> None:
    home, home_seen, _, _ = servers
    second, second_seen = serve("127.0.0.1")
    try:
        there = f"http://127.0.0.1:{second.server_port}/api/x"
        ApiClient(Target(home, TOKEN)).call("GET", "/go", query={"to": there, "code": 302})
        assert second_seen == [("/api/x", None)]
        # The same origin (a relative Location too) keeps it: that is where it was given.
        ApiClient(Target(home, TOKEN)).call("GET", "/go", query={"to": "/api/y", "code": 302})
        assert home_seen[-1] == ("/api/y", f"Bearer {TOKEN}")
    finally:
        second.shutdown()
        second.server_close()
