"""A slow websocket consumer on a real server (uvicorn on loopback, real TCP back-pressure): a
client that never reads holds at most `live_queue_size` messages in the hub while the server
sends on, a fast client beside it gets every recent frame, and memory does not grow with
what was published. The producer is the app's own hub, fed big frames from its loop."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from websockets.sync.client import connect

from harness.processes import free_port, http_post
from observe.scrape.topics import DEFAULT_WINDOW, frame_topic
from state.hub import Hub
from tests.specs import nixl_1p1d
from web.app import create_app
from web.settings import Settings

pytestmark = pytest.mark.e2e

QUEUE = 8
FRAMES = 1200
FRAME_BYTES = 64 * 1024  # 75 MiB published in all


@dataclass
class Server:
    url: str
    loop: asyncio.AbstractEventLoop
    hub: Hub


@pytest.fixture
def server(tmp_path: Path, migrated: Path) -> Iterator[Server]:
    db = tmp_path / "pdctl.db"
    shutil.copy(migrated, db)
    settings = Settings(
        db=db,
        migrate_on_start=False,
        controller=False,
        runtime_dir=tmp_path / "runs",
        live_queue_size=QUEUE,
    )
    app = create_app(settings)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws_ping_interval=None
    )
    userver = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(userver.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not userver.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield Server(f"http://127.0.0.1:{port}", loop, app.state.hub)
    finally:
        userver.should_exit = True
        thread.join(15)
        loop.close()


def never_reading_socket(url: str, path: str) -> socket.socket:
    """A websocket client that shakes hands and then never reads: a tiny receive buffer, so
    the server's writes back up at once."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    sock.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)  # byte by byte: nothing past the handshake is read
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_consumer_that_never_reads_is_capped_and_stalls_no_one(server: Server) -> None:
    assert http_post(server.url + "/api/deployments", nixl_1p1d())[0] == 201
    topic = frame_topic("pd", DEFAULT_WINDOW)
    ws_path = "/ws/deployments/pd"
    slow = never_reading_socket(server.url, ws_path)
    worst_pending: list[int] = []
    publish_times: list[float] = []

    def publish(seq: int) -> None:  # on the server's loop, as the observer publishes
        # the loop thread's own CPU time: a wait for a consumer would show as work here (a
        # copy, a drain), where wall time also counts the machine's other processes
        t0 = time.thread_time()
        server.hub.publish(
            topic, json.dumps({"type": "frame", "seq": seq, "pad": "x" * FRAME_BYTES})
        )
        publish_times.append(time.thread_time() - t0)
        worst_pending.append(max(s.pending() for s in server.hub._topics[topic]))

    try:
        with connect(
            server.url.replace("http", "ws") + ws_path, open_timeout=10, max_size=None
        ) as fast:
            assert json.loads(fast.recv(timeout=10))["type"] == "history"
            deadline = time.monotonic() + 10
            while server.hub.subscribers(topic) < 2:
                assert time.monotonic() < deadline, "both sockets subscribed"
                time.sleep(0.02)
            before = rss_bytes()
            got: list[int] = []
            for seq in range(FRAMES):
                server.loop.call_soon_threadsafe(publish, seq)
                if seq % 50 == 49:
                    time.sleep(0.01)  # a producer at its own pace, not a tight loop
            end = time.monotonic() + 30
            while time.monotonic() < end and (not got or got[-1] < FRAMES - 1):
                left = max(0.01, end - time.monotonic())
                got.append(json.loads(fast.recv(timeout=left))["seq"])
            grown = rss_bytes() - before
            subs = sorted(server.hub._topics[topic], key=lambda s: s.dropped)
    finally:
        slow.close()

    assert got[-1] == FRAMES - 1, "the fast consumer got the last frame"
    assert got == sorted(got), "in order"
    assert len(worst_pending) == FRAMES and max(worst_pending) <= QUEUE
    stalled = subs[-1]  # the one that never read
    assert stalled.pending() <= QUEUE
    # What left its queue sits in socket buffers (the kernel's, uvicorn's high-water mark):
    # a few MiB at most; the rest was dropped.
    sent = FRAMES - stalled.dropped - stalled.pending()
    assert sent * FRAME_BYTES < 8 << 20, f"{sent} frames went into the stalled socket"
    # 75 MiB went through the hub; what the stalled socket holds is its queue and a socket
    # buffer, a few MiB. Kept, every frame would be 75 MiB more.
    assert grown < 40 << 20, f"memory grew {grown >> 20} MiB"
    assert max(publish_times) < 0.05, "publishing never waits for a consumer"
    deadline = time.monotonic() + 10
    while server.hub.subscribers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.hub.subscribers() == 0, "both sockets were let go"
