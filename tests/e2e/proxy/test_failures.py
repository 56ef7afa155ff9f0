"""Every proxy failure caused for real, and what the client gets back.

The stand-ins run 20-40x slower than modelled (--time-scale) so that a stream lasts long enough
to kill, stop or abandon it half-way.
"""

import http.client
import json
import signal
import time

import pytest

from harness.processes import http_post, running
from harness.stack import (
    aborted,
    gauge,
    instances,
    moriio_sim,
    nixl_sim,
    proxy,
    send,
    wait_until,
    zmq_address,
)

pytestmark = pytest.mark.e2e

SLOW = ("--time-scale", "20")  # tiny model: ~40 ms a token, one stream lasts seconds
LONG = {"model": "tiny", "prompt": "a b c d " * 50, "max_tokens": 400, "ignore_eos": True}


class Stream:
    """A raw streamed completion: read events one by one, or hang up half-way."""

    def __init__(self, url: str, body: dict, headers_first: bool = True) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.conn.request(
            "POST",
            "/v1/completions",
            json.dumps({**body, "stream": True}),
            {"Content-Type": "application/json"},
        )
        self.response = self.conn.getresponse() if headers_first else None

    def events(self):
        for line in self.response:
            if line.startswith(b"data: "):
                yield line[6:].strip()

    def close(self) -> None:
        if self.response is not None:
            self.response.close()
        self.conn.close()


def complete(front, **extra):
    return http_post(
        front.url + "/v1/completions",
        {"model": "tiny", "prompt": "hello " * 40, "max_tokens": 3, "ignore_eos": True, **extra},
    )


def test_decode_killed_mid_stream_ends_the_stream_with_an_error_then_routes_around(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decodes = [nixl_sim(tmp_path, f"decode{i}", "kv_consumer", *SLOW) for i in (1, 2)]
    with running(prefill, *decodes):
        front = proxy(
            tmp_path,
            "proxy",
            "--prefill",
            prefill.url,
            "--decode",
            decodes[0].url,
            "--decode",
            decodes[1].url,
            "--health-interval",
            "0.3",
        )
        with running(front):
            stream = Stream(front.url, LONG)
            assert stream.response.status == 200
            events = stream.events()
            first = [next(events) for _ in range(5)]
            assert all(b'"choices"' in e for e in first)
            victim = next(d for d in decodes if gauge(d, "vllm:num_requests_running") == 1)
            survivor = decodes[1 - decodes.index(victim)]
            victim.kill(signal.SIGKILL)
            rest = list(events)
            stream.close()
            assert rest[-1] == b"[DONE]"
            error = json.loads(rest[-2])["error"]
            assert error["leg"] == "decode" and error["instance"] == victim.url
            assert victim.url in error["message"] and error["code"] == 502
            assert len(first) + len(rest) - 2 < 400  # cut short, and said so

            # The next requests go to the survivor once the health check has seen the death.
            wait_until(
                lambda: not next(i for i in instances(front) if i["url"] == victim.url)["healthy"],
                10,
                "the killed decode marked unhealthy",
            )
            for _ in range(4):
                status, out = complete(front)
                assert status == 200 and out["usage"]["completion_tokens"] == 3
            # With no decode left: 503 naming what is missing, with Retry-After.
            survivor.kill(signal.SIGKILL)
            wait_until(lambda: complete(front)[0] == 503, 10, "503 with no decode")
            status, err = complete(front)
            assert status == 503 and "no available decode" in err["error"]["message"]


def test_prefill_killed_gives_502_naming_the_prefill(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer")
    with running(prefill, decode):
        front = proxy(
            tmp_path,
            "proxy",
            "--prefill",
            prefill.url,
            "--decode",
            decode.url,
            "--health-interval",
            "0",
        )
        with running(front):
            assert complete(front)[0] == 200
            prefill.kill(signal.SIGKILL)
            for stream in (False, True):
                status, err = complete(front, stream=stream)
                assert status == 502
                assert err["error"]["leg"] == "prefill"
                assert err["error"]["instance"] == prefill.url
                assert f"prefill leg to {prefill.url} failed" in err["error"]["message"]
            assert gauge(decode, "vllm:num_requests_running") == 0


def test_stopped_prefill_times_out_clearly_and_recovers(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer")
    with running(prefill, decode):
        front = proxy(
            tmp_path,
            "proxy",
            "--prefill",
            prefill.url,
            "--decode",
            decode.url,
            "--health-interval",
            "0",
            "--prefill-timeout",
            "1.5",
        )
        with running(front):
            send(prefill, signal.SIGSTOP)
            try:
                start = time.monotonic()
                status, err = complete(front)
                waited = time.monotonic() - start
            finally:
                send(prefill, signal.SIGCONT)
            assert status == 502 and 1.0 < waited < 15
            assert err["error"]["type"] == "GatewayTimeoutError"
            assert err["error"]["leg"] == "prefill" and err["error"]["instance"] == prefill.url
            assert "no answer within 1.5 s" in err["error"]["message"]
            status, out = complete(front)
            assert status == 200 and out["usage"]["completion_tokens"] == 3


def test_stopped_decode_mid_stream_ends_with_a_timeout_event_and_recovers(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer", *SLOW)
    with running(prefill, decode):
        front = proxy(
            tmp_path,
            "proxy",
            "--prefill",
            prefill.url,
            "--decode",
            decode.url,
            "--health-interval",
            "0",
            "--decode-timeout",
            "1.5",
        )
        with running(front):
            stream = Stream(front.url, LONG)
            events = stream.events()
            for _ in range(3):
                next(events)
            send(decode, signal.SIGSTOP)
            try:
                start = time.monotonic()
                rest = list(events)
                waited = time.monotonic() - start
            finally:
                send(decode, signal.SIGCONT)
            stream.close()
            assert rest[-1] == b"[DONE]" and waited < 15
            error = json.loads(rest[-2])["error"]
            assert error["type"] == "GatewayTimeoutError" and error["leg"] == "decode"
            assert error["instance"] == decode.url and "1.5 s" in error["message"]
            # Woken up, the decode sees the proxy hung up and aborts the request.
            wait_until(lambda: aborted(decode) >= 1, 10, "decode aborted the request")
            wait_until(lambda: gauge(decode, "vllm:num_requests_running") == 0, 10)
            status, out = complete(front)
            assert status == 200 and out["usage"]["completion_tokens"] == 3


def test_client_disconnect_mid_stream_aborts_the_decode(tmp_path):
    prefill = nixl_sim(tmp_path, "prefill", "kv_producer")
    decode = nixl_sim(tmp_path, "decode", "kv_consumer", *SLOW)
    with running(prefill, decode):
        front = proxy(tmp_path, "proxy", "--prefill", prefill.url, "--decode", decode.url)
        with running(front):
            stream = Stream(front.url, LONG)
            events = stream.events()
            for _ in range(3):
                next(events)
            assert gauge(decode, "vllm:num_requests_running") == 1
            stream.close()
            wait_until(lambda: aborted(decode) == 1, 10, "decode aborted")
            assert gauge(decode, "vllm:num_requests_running") == 0
            assert gauge(decode, "vllm:request_success_total", finished_reason="length") == 0
            wait_until(
                lambda: gauge(front, "pdctl_proxy_requests_total", outcome="cancelled") == 1,
                5,
                "proxy counted it",
            )


def test_client_disconnect_during_write_mode_cancels_both_legs(tmp_path):
    """MoRIIO WRITE: both legs run at once; hanging up during the (slowed) prefill must abort
    the prefill and the decode that waits for its push."""
    # 1,000 prompt tokens in 16 chunks of 64, each step played 100x slower: ~5 s of prefill.
    prefill = moriio_sim(
        tmp_path,
        "prefill",
        "kv_producer",
        False,
        None,
        "--time-scale",
        "100",
        "--max-num-batched-tokens",
        "64",
    )
    decode = moriio_sim(tmp_path, "decode", "kv_consumer", False)
    with running(prefill, decode):
        front = proxy(
            tmp_path,
            "proxy",
            "--connector",
            "moriio",
            "--mode",
            "write",
            "--prefill",
            f"{prefill.url}#{zmq_address(prefill)}",
            "--decode",
            f"{decode.url}#{zmq_address(decode)}",
        )
        with running(front):
            body = {**LONG, "prompt": list(range(100, 1100)), "max_tokens": 8}
            stream = Stream(front.url, body, headers_first=False)
            wait_until(
                lambda: gauge(prefill, "vllm:num_requests_running") == 1, 10, "prefill running"
            )
            wait_until(
                lambda: (
                    gauge(decode, "vllm:num_requests_running")
                    + gauge(decode, "vllm:num_requests_waiting")
                    == 1
                ),
                10,
                "decode waiting for the push",
            )
            stream.close()
            for leg in (prefill, decode):
                wait_until(lambda leg=leg: aborted(leg) == 1, 10, f"{leg.args} aborted")
                assert gauge(leg, "vllm:num_requests_running") == 0
                assert gauge(leg, "vllm:num_requests_waiting") == 0
