"""What one ZMQ peer can make the proxy hold is bounded per message (issue 39, weak 7): a
12,000-frame message (each frame under the per-frame limit) is cut off after MAX_FRAMES
frames, its sender disconnected, the refusal counted; a frame over the limit likewise; and
registrations from real DEALERs (and a REQ-shaped one, delimiter first) still work, before
and after. Real ZMQ sockets against the proxy's receiver."""

from __future__ import annotations

import asyncio
import resource

import msgpack
import zmq

from connector.registry.message import MAX_MESSAGE_BYTES
from connector.registry.table import MAX_FRAMES
from tests.connector.fakes import (
    FakeEngine,
    engines,
    registry_dealer,
    run,
    running,
    settings_for,
)
from tests.connector.registry.test_table_zmq import NEW
from tests.connector.test_proxy import until


def send_frames(dealer: zmq.Socket, count: int, size: int) -> None:
    chunk = b"x" * size
    for _ in range(count - 1):
        dealer.send(chunk, zmq.SNDMORE)
    dealer.send(chunk)


def test_a_message_of_many_small_frames_is_cut_off_and_registrations_still_work():
    async def body():
        settings = settings_for(registry_port=0, connector="moriio")
        async with engines(FakeEngine("p")) as (pe,), running(settings) as (_, proxy):
            refused = proxy.metrics.registry_rejected
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            with registry_dealer(proxy.registry_port) as flood:
                await asyncio.to_thread(send_frames, flood, 12_000, MAX_MESSAGE_BYTES - 100)
                assert await until(lambda: refused.get("too_large") == 1, seconds=30)
            # The receiver held at most MAX_FRAMES frames of it, not the 190 MB sent
            # (the sender's own copy is counted in this process too, so: well under it).
            grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
            assert grown_kb < 250_000
            with registry_dealer(proxy.registry_port) as big:
                big.send(b"y" * (MAX_MESSAGE_BYTES + 1))
                assert await until(lambda: refused.get("too_large") == 2)
            with registry_dealer(proxy.registry_port) as dealer:
                # a REQ's shape: an empty delimiter, then the registration
                dealer.send_multipart([b"", msgpack.packb({**NEW, "http_address": pe.url[7:]})])
                assert await until(lambda: proxy.pool.get(pe.url) is not None)
                send_frames(dealer, MAX_FRAMES + 1, 10)
                assert await until(lambda: refused.get("too_large") == 3)

    run(body())


def test_the_receiver_cuts_a_message_off_once_it_passes_the_frame_bound():
    """In-process, the receiver's own reads: it stops at MAX_FRAMES, whatever follows."""
    from connector.registry.zmtp import ZmtpReceiver

    async def body():
        import socket

        got, refusals = [], []
        receiver = ZmtpReceiver(
            lambda frames, ip: got.append(frames),
            lambda reason, why, ip: refusals.append((reason, why, ip)),
            max_frames=3,
            max_frame_bytes=100,
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        task = asyncio.create_task(receiver.serve(sock))
        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(f"tcp://127.0.0.1:{sock.getsockname()[1]}")
        try:
            dealer.send_multipart([b"a", b"b"])
            assert await until(lambda: got == [[b"a", b"b"]])
            dealer.send_multipart([b"f"] * 1000)
            assert await until(lambda: refusals)
            assert refusals[0][:1] == ("too_large",) and refusals[0][2] == "127.0.0.1"
            assert "more than 3 frames" in refusals[0][1]
            assert got == [[b"a", b"b"]]
        finally:
            dealer.close()
            ctx.term()
            receiver.close()
            task.cancel()

    run(body())
