"""Fault injection (`pdctl sim --enable-fault-injection`) and vLLM's periodic stats line."""

import json
import time
import urllib.request

import msgpack
import pytest
import zmq

from harness.processes import free_port, http_get, http_post, running, sim
from simulator.config.faults import Fault, FaultError, Faults, parse_fault
from simulator.engine.stats_log import StatsLine, interval_from
from tests.simulator.factories import scheduler

BODY = {"model": "tiny", "prompt": "a b c", "max_tokens": 4, "ignore_eos": True}


def test_parse_fault_names_the_field():
    assert parse_fault({"fault": "stall", "after_tokens": 2}) == Fault("stall", 2)
    assert parse_fault({"fault": "mode", "mode": "write"}) == Fault("mode", 0, "write")
    slow = parse_fault({"fault": "slow_health", "seconds": 2})
    assert slow == Fault("slow_health", seconds=2.0) and slow.surface == "health"
    for body, field in (
        ([], "object"),
        ({"fault": "boom"}, "'fault'"),
        ({"fault": "stall", "after_tokens": -1}, "'after_tokens'"),
        ({"fault": "garbage", "after_tokens": True}, "'after_tokens'"),
        ({"fault": "mode", "mode": "sideways"}, "'mode'"),
        ({"fault": "slow_health"}, "'seconds'"),
        ({"fault": "slow_health", "seconds": 0}, "'seconds'"),
        ({"fault": "slow_health", "seconds": "1"}, "'seconds'"),
        ({"fault": "slow_health", "seconds": 601}, "'seconds'"),
    ):
        with pytest.raises(FaultError, match=field):
            parse_fault(body)


def test_heartbeat_faults_skip_or_change_the_registration():
    faults, message = Faults(), {"type": "D", "transfer_mode": "READ"}
    assert faults.heartbeat(message) is message
    faults.current = Fault("silent")
    assert faults.heartbeat(message) is None
    faults.current = Fault("mode", mode="write")
    assert faults.heartbeat(message) == {"type": "D", "transfer_mode": "WRITE"}
    faults.current = Fault("garbage")
    assert faults.heartbeat(message) is message and faults.for_requests() == Fault("garbage")


def test_stats_line_reports_throughput_and_stays_quiet_when_idle():
    s = scheduler("tiny", "cpu", 1)
    stats = StatsLine()
    assert stats.line(s, 1.0, "04-07 10:00:00") is None  # idle
    s.counters.prompt_tokens, s.counters.generation_tokens = 640, 32
    line = stats.line(s, 2.0, "04-07 10:00:02")
    assert line == (
        "INFO 04-07 10:00:02 [loggers.py] Engine 000: Avg prompt throughput: "
        "320.0 tokens/s, Avg generation throughput: 16.0 tokens/s, Running: 0 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
    )
    assert stats.line(s, 2.0, "t") is not None  # the interval after activity, as vLLM does
    assert stats.line(s, 2.0, "t") is None
    assert interval_from({"VLLM_LOG_STATS_INTERVAL": "0.5"}) == 0.5
    assert interval_from({"VLLM_LOG_STATS_INTERVAL": "soon"}) == 10.0


def stream_raw(url: str, body: dict, timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        out = b""
        try:
            while chunk := resp.read1(65536):
                out += chunk
        except TimeoutError:
            pass
        return resp.status, out


@pytest.mark.e2e
def test_faults_make_a_live_instance_answer_garbage_or_stall(tmp_path):
    proc = sim(
        tmp_path,
        "faulty",
        "tiny",
        "--enable-fault-injection",
        env={"VLLM_LOG_STATS_INTERVAL": "0.2"},
    )
    with running(proc):
        assert http_post(proc.url + "/_fault", {"fault": "nope"})[0] == 400
        assert http_post(proc.url + "/_fault", {"fault": "garbage"})[0] == 200
        with urllib.request.urlopen(
            urllib.request.Request(
                proc.url + "/v1/completions",
                data=json.dumps(BODY).encode(),
                headers={"Content-Type": "application/json"},
            ),
            timeout=5,
        ) as resp:
            assert resp.status == 200
            with pytest.raises(ValueError):
                json.loads(resp.read())
        status, raw = stream_raw(proc.url, {**BODY, "stream": True}, 5)
        assert status == 200 and raw.startswith(b"data: \x8f") and b"[DONE]" not in raw

        http_post(proc.url + "/_fault", {"fault": "stall", "after_tokens": 2})
        started = time.monotonic()
        status, raw = stream_raw(proc.url, {**BODY, "stream": True}, 1.0)
        assert status == 200 and raw.count(b"data: {") == 2 and b"[DONE]" not in raw
        assert time.monotonic() - started < 5
        assert http_get(proc.url + "/health")[0] == 200  # looks alive all along

        req = urllib.request.Request(proc.url + "/_fault", method="DELETE")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read()) == {"fault": None}
        status, answer = http_post(proc.url + "/v1/completions", BODY)
        assert status == 200 and answer["usage"]["completion_tokens"] == 4
        deadline = time.monotonic() + 5
        while "Avg generation throughput" not in proc.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "Engine 000: Avg prompt throughput" in proc.log()


@pytest.mark.e2e
def test_no_fault_routes_without_the_flag(tmp_path):
    proc = sim(tmp_path, "plain", "tiny")
    with running(proc):
        req = urllib.request.Request(proc.url + "/_fault", data=b'{"fault": "stall"}')
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        refused.value.close()
        assert refused.value.code == 404


@pytest.mark.e2e
def test_silent_and_mode_faults_change_the_heartbeat(tmp_path):
    ping = free_port()
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.bind(f"tcp://127.0.0.1:{ping}")
    port = free_port()
    config = {
        "kv_connector": "MoRIIOConnector",
        "kv_role": "kv_consumer",
        "kv_connector_extra_config": {
            "http_port": str(port),
            "handshake_port": str(free_port()),
            "notify_port": str(free_port()),
            "read_mode": "true",
            "proxy_ip": "127.0.0.1",
            "proxy_ping_port": str(ping),
        },
    }
    proc = sim(
        tmp_path,
        "d",
        "tiny",
        "--registration-interval",
        "0.1",
        "--enable-fault-injection",
        "--kv-transfer-config",
        json.dumps(config),
        port=port,
    )

    def beats(seconds: float) -> list[dict]:
        out, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            if router.poll(50):
                out.append(msgpack.unpackb(router.recv_multipart()[-1]))
        return out

    try:
        with running(proc):
            assert {b["transfer_mode"] for b in beats(0.5)} == {"READ"}
            http_post(proc.url + "/_fault", {"fault": "mode", "mode": "write"})
            beats(0.2)  # in flight
            assert {b["transfer_mode"] for b in beats(0.5)} == {"WRITE"}
            http_post(proc.url + "/_fault", {"fault": "silent"})
            beats(0.2)
            assert beats(0.6) == []
            assert http_post(proc.url + "/v1/completions", BODY)[0] == 200  # still serving
    finally:
        router.close(linger=0)


@pytest.mark.e2e
def test_slow_health_delays_health_while_generation_serves(tmp_path):
    proc = sim(tmp_path, "slow", "tiny", "--enable-fault-injection")
    with running(proc):
        status, shown = http_post(proc.url + "/_fault", {"fault": "slow_health", "seconds": 1.5})
        assert status == 200 and shown["seconds"] == 1.5
        started = time.monotonic()
        assert http_post(proc.url + "/v1/completions", BODY)[0] == 200
        assert time.monotonic() - started < 1.0  # generation is untouched
        with pytest.raises(TimeoutError):
            http_get(proc.url + "/health", timeout=0.5)
        started = time.monotonic()
        assert http_get(proc.url + "/health", timeout=5)[0] == 200
        assert time.monotonic() - started >= 1.4
