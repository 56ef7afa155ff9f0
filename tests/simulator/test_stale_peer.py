"""A prefill restarted at the same address while its decode runs on: the decode keeps the old
engine's agent (simulator/kv/peers.py) and, as released NIXL/MoRIIO do, hangs or fails every
transfer through it; `heal` handshakes again (vLLM with PR 50047)."""

import json
import time
import urllib.request

import pytest

from harness.processes import free_port, http_post, metric_value, running, sim
from simulator.kv.peers import PeerAgents, stale_reply
from tests.simulator.server.test_app_handoff import NIXL_PREFILL

pytestmark = pytest.mark.e2e


def _nixl(tmp_path, name, side_port, *flags, port=None):
    config = {
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"transfer_timeout": 1},
    }
    return sim(
        tmp_path,
        name,
        *flags,
        "--kv-transfer-config",
        json.dumps(config),
        env={"VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_port)},
        port=port,
    )


def _pd(prefill, decode):
    _, first = http_post(
        prefill.url + "/v1/completions",
        {"prompt": "a b c d", "max_tokens": 1, "kv_transfer_params": NIXL_PREFILL},
    )
    started = time.monotonic()
    status, _ = http_post(
        decode.url + "/v1/completions",
        {"prompt": "a b c d", "max_tokens": 4, "kv_transfer_params": first["kv_transfer_params"]},
    )
    return status, time.monotonic() - started


@pytest.mark.parametrize("how", ["heal", "fail", "hang"])
def test_a_restarted_prefill_meets_the_decodes_stale_agent(tmp_path, how):
    side = free_port()
    prefill = _nixl(tmp_path, "p1", side)
    decode = _nixl(tmp_path, "d", free_port(), "--kv-stale-peer", how)
    with running(prefill, decode):
        assert _pd(prefill, decode)[0] == 200  # the handshake: the decode learns the agent
        prefill.stop()
        restarted = _nixl(tmp_path, "p2", side, port=prefill.port)
        with running(restarted):
            for _ in range(2):  # not once: every transfer through the stale agent
                status, took = _pd(restarted, decode)
                if how == "heal":
                    assert status == 200
                else:
                    assert status == 500
                    assert (took >= 0.9) == (how == "hang")
            failed = metric_value(decode.metrics(), "vllm:nixl_num_failed_transfers_total")
            assert failed == (0 if how == "heal" else 2)
            if how != "heal":
                assert "the KV handshake with" in decode.log()


def test_the_agent_learned_first_stays_until_healed():
    peers = PeerAgents("fail")
    peers.learned("h", 1, "old")
    peers.learned("h", 1, "new")  # a later answer does not replace it (it is never asked)
    assert peers.agent("h", 1) == "old"
    assert "engine old" in peers.met_stale("h", 1, "new")
    healing = PeerAgents("heal")
    healing.learned("h", 1, "old")
    assert healing.met_stale("h", 1, "new") is None and healing.agent("h", 1) == "new"
    assert stale_reply({"agent": "old"}, "new")["stale"] is True
    assert stale_reply({"agent": None}, "new") is None
    with pytest.raises(ValueError, match="--kv-stale-peer"):
        PeerAgents("maybe")


def test_a_chat_stream_whose_transfer_fails_sends_no_role_chunk_before_the_error(tmp_path):
    """vLLM sends a chat stream's role chunk with its first output: after the KV arrived, so
    a stream that fails on its transfer carries the error event alone (a proxy reads any
    event before the first token as streaming, which a retry may not follow)."""
    side = free_port()
    prefill = _nixl(tmp_path, "p1", side)
    decode = _nixl(tmp_path, "d", free_port(), "--kv-stale-peer", "fail")
    with running(prefill, decode):
        assert _pd(prefill, decode)[0] == 200
        prefill.stop()
        restarted = _nixl(tmp_path, "p2", side, port=prefill.port)
        with running(restarted):
            messages = [{"role": "user", "content": "a b c d"}]
            _, first = http_post(
                restarted.url + "/v1/chat/completions",
                {"messages": messages, "max_tokens": 1, "kv_transfer_params": NIXL_PREFILL},
            )
            body = {
                "messages": messages,
                "max_tokens": 4,
                "stream": True,
                "kv_transfer_params": first["kv_transfer_params"],
            }
            req = urllib.request.Request(
                decode.url + "/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert status == 200 and events, raw
    assert b'"role"' not in raw, events[0]
    assert events[0].startswith(b'data: {"error"'), events[0]
