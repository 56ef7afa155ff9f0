"""Access rules checked from the outside, on a real `pdctl serve` with tokens: websockets need
a token and shed a flood with 1013 while the sockets already open keep receiving; no secret
(a token, a deployment's secret env or flag) reaches the log, events, command previews or an
error body; a cross-origin post is refused."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from harness.processes import Process, free_port, port_range
from tests.specs import nixl_1p1d

pytestmark = pytest.mark.e2e

OP_SECRET, VIEW_SECRET = "op-Zq81-secret", "view-Kp27-secret"
HF_SECRET, API_SECRET = "hf_deploy_Yw93", "sk-deploy-Rm55"
SECRETS = (OP_SECRET, VIEW_SECRET, HF_SECRET, API_SECRET)
AS_OPERATOR = {"Authorization": f"Bearer {OP_SECRET}"}
AS_VIEWER = {"Authorization": f"Bearer {VIEW_SECRET}"}
MAX_WEBSOCKETS = 3


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    tmp = tmp_path_factory.mktemp("access")
    port = free_port()
    proc = Process(
        ["serve", "--port", str(port), "--db", str(tmp / "pdctl.db")],
        port,
        env={
            "PDCTL_RUNTIME_DIR": str(tmp / "runs"),
            "PDCTL_PORT_RANGE": port_range(),
            "PDCTL_OPERATOR_TOKENS": f"alice:{OP_SECRET}",
            "PDCTL_VIEWER_TOKENS": f"bob:{VIEW_SECRET}",
            "PDCTL_MAX_WEBSOCKETS": str(MAX_WEBSOCKETS),
            "PDCTL_LOGIN_ATTEMPTS_PER_MINUTE": "1000",
            "PYTHONUNBUFFERED": "1",
        },  # the log is read while it runs
        log_path=tmp / "serve.log",
    )
    try:
        proc.wait_healthy(30)
        status, _ = call(proc, "POST", "/api/deployments", nixl_1p1d("live"), AS_OPERATOR)
        assert status == 201
        yield proc
    finally:
        proc.stop()


def call(
    proc: Process,
    method: str,
    path: str,
    body: object = None,
    headers: dict | None = None,
    form: str | None = None,
) -> tuple[int, str]:
    data, kind = None, "application/json"
    if form is not None:
        data, kind = form.encode(), "application/x-www-form-urlencoded"
    elif body is not None:
        data = json.dumps(body).encode()
    req = urllib.request.Request(
        proc.url + path, data=data, method=method, headers={"Content-Type": kind, **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def ws_url(proc: Process, query: str = "") -> str:
    return proc.url.replace("http://", "ws://") + "/ws/deployments/live" + query


def closed_with(proc: Process, query: str = "", headers: dict | None = None) -> tuple[int, str]:
    """The close code and reason a socket gets before any message."""
    with connect(ws_url(proc, query), additional_headers=headers, open_timeout=10) as ws:
        try:
            message = ws.recv(timeout=10)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            return closed.rcvd.code, closed.rcvd.reason
    raise AssertionError(f"not closed; got {message[:200]!r}")


def receive(ws: ClientConnection, kind: str, where=lambda m: True, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        message = json.loads(ws.recv(timeout=left))
        if message["type"] == kind and where(message):
            return message
    raise TimeoutError(kind)


def open_socket(proc: Process, stack: ExitStack, timeout: float = 10.0) -> ClientConnection:
    """A viewer's socket that got its history, closed with `stack`; retried while the slots
    of sockets closed just before are released."""
    deadline = time.monotonic() + timeout
    while True:
        with ExitStack() as attempt:
            ws = attempt.enter_context(
                connect(ws_url(proc), additional_headers=AS_VIEWER, open_timeout=10)
            )
            try:
                assert json.loads(ws.recv(timeout=10))["type"] == "history"
            except ConnectionClosed:
                if time.monotonic() > deadline:
                    raise
            else:
                stack.push(attempt.pop_all())
                return ws
        time.sleep(0.1)


def test_a_websocket_needs_a_known_token(serve: Process) -> None:
    refused = "a valid viewer or operator token is required"
    assert closed_with(serve) == (4401, refused)
    assert closed_with(serve, "?token=wrong") == (4401, refused)
    assert closed_with(serve, headers={"Authorization": "Bearer wrong"}) == (4401, refused)
    assert closed_with(serve, headers={"Cookie": "pdctl_token=wrong"}) == (4401, refused)
    for query, headers in (
        ("", AS_VIEWER),
        (f"?token={VIEW_SECRET}", None),
        ("", {"Cookie": f"pdctl_token={VIEW_SECRET}"}),
        ("", AS_OPERATOR),
    ):
        with connect(ws_url(serve, query), additional_headers=headers, open_timeout=10) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "history"


def test_a_cross_origin_handshake_is_refused(serve: Process) -> None:
    code, reason = closed_with(serve, headers={**AS_VIEWER, "Origin": "http://evil.example"})
    assert code == 4403 and "cross-origin request refused" in reason


def test_a_flood_past_the_limit_gets_1013_while_open_sockets_keep_receiving(serve: Process) -> None:
    with ExitStack() as stack:
        held = [open_socket(serve, stack) for _ in range(MAX_WEBSOCKETS)]

        def one_more(_: int) -> tuple[int, str]:
            return closed_with(serve, headers=AS_VIEWER)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one_more, range(40)))
        assert {code for code, _ in answers} == {1013}
        assert answers[0][1] == (
            f"too many live connections (limit {MAX_WEBSOCKETS}); try again later"
        )
        # the sockets already open still get what happens
        status, _ = call(
            serve, "PUT", "/api/deployments/live", nixl_1p1d("live", time_scale=2.0), AS_OPERATOR
        )
        assert status == 200
        for ws in held:
            event = receive(ws, "event", where=lambda e: e["kind"] == "deployment.updated")
            assert event["deployment"] == "live"
    with ExitStack() as stack:  # the slots are freed once they close
        assert len([open_socket(serve, stack) for _ in range(MAX_WEBSOCKETS)]) == 3


def test_a_cross_origin_post_is_refused(serve: Process) -> None:
    status, body = call(
        serve,
        "POST",
        "/api/deployments",
        nixl_1p1d("evil"),
        {"Cookie": f"pdctl_token={OP_SECRET}", "Origin": "http://evil.example"},
    )
    assert status == 403
    assert json.loads(body)["detail"].startswith(
        "cross-origin request refused: origin http://evil.example"
    )
    assert call(serve, "GET", "/api/deployments/evil", headers=AS_VIEWER)[0] == 404


def test_no_secret_in_previews_events_error_bodies_or_the_log(serve: Process) -> None:
    spec = nixl_1p1d(
        "secretive",
        engine="vllm",  # --api-key is vLLM's: the stand-in does not take it
        env={"HF_TOKEN": HF_SECRET},
        extra_args=["--api-key", API_SECRET, "--seed", "1"],
    )
    status, body = call(serve, "POST", "/api/deployments", spec, AS_OPERATOR)
    assert status == 201, body
    shown: list[str] = []
    status, commands = call(serve, "GET", "/api/deployments/secretive/commands", headers=AS_VIEWER)
    assert status == 200 and "HF_TOKEN" in commands and "--api-key" in commands
    shown.append(commands)
    status, page = call(
        serve,
        "GET",
        "/deployments/secretive/commands",
        headers={"Cookie": f"pdctl_token={VIEW_SECRET}"},
    )
    assert status == 200 and "--api-key" in page
    shown.append(page)
    # error bodies: 401 (near misses of real tokens), 403, 422 with the secret in it, login
    for headers in (
        {"Authorization": f"Bearer {OP_SECRET}x"},
        {"Authorization": f"Bearer {VIEW_SECRET[:-1]}"},
        {"Cookie": f"pdctl_token={OP_SECRET[1:]}"},
    ):
        status, body = call(serve, "GET", "/api/events", headers=headers)
        assert status == 401
        shown.append(body)
    status, body = call(serve, "DELETE", "/api/deployments/secretive", headers=AS_VIEWER)
    assert status == 403
    shown.append(body)
    status, body = call(
        serve,
        "POST",
        "/api/deployments",
        nixl_1p1d("bad", env={"HF_TOKEN": HF_SECRET, "bad name": OP_SECRET}),
        AS_OPERATOR,
    )
    assert status == 422
    shown.append(body)
    status, body = call(serve, "POST", "/login", form=f"token={OP_SECRET}x")
    assert status == 401
    shown.append(body)
    with connect(ws_url(serve, f"?token={VIEW_SECRET}"), open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "history"  # a token in a URL
    assert call(serve, "DELETE", "/api/deployments/secretive", headers=AS_OPERATOR)[0] == 204
    status, events = call(serve, "GET", "/api/events?limit=1000", headers=AS_OPERATOR)
    assert status == 200 and '"deployment.deleted"' in events and '"HF_TOKEN"' in events
    shown.append(events)
    for text in shown:
        for secret in SECRETS:
            assert secret not in text, (secret, text[:500])
    log = _settled_log(serve.log_path, "token=***")
    assert "GET /api/events" in log and "/ws/deployments/live?token=***" in log
    for secret in SECRETS:
        assert secret not in log, secret


def _settled_log(path: Path | None, expect: str, timeout: float = 5.0) -> str:
    assert path is not None
    deadline = time.monotonic() + timeout
    while expect not in (text := path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return text


def test_websocket_handshake_without_upgrade_is_a_plain_error(serve: Process) -> None:
    # A client that is not a websocket client at all gets an HTTP error, not a hang.
    with (
        pytest.raises(InvalidStatus),
        connect(ws_url(serve).replace("/ws/deployments/live", "/api/events"), open_timeout=10),
    ):
        pass
