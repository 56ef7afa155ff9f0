import json
import re

import pytest

from connector.legs.rewrite import (
    Handoff,
    Peer,
    check_combination,
    colocated_bytes,
    decode_body,
    decode_bytes,
    leg_headers,
    prefill_body,
    returned_params,
)
from domain.kv_connectors.moriio import moriio_request_id

HEX = "0123456789abcdef0123456789abcdef"
P_ZMQ = "host:10.0.0.1,handshake:6301,notify:6105"
D_ZMQ = "host:10.0.0.2,handshake:7301,notify:7501"


def client_body(**extra):
    body = {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
        "min_tokens": 3,
    }
    body.update(extra)
    return body


def handoff(connector="nixl", mode="read", p_dp=1, d_dp=1, p_rank=None, d_rank=None):
    return Handoff(connector, mode, HEX, Peer(P_ZMQ, p_dp, 2), Peer(D_ZMQ, d_dp, 4), p_rank, d_rank)


def test_prefill_leg_is_one_token_unstreamed_without_stream_options():
    body = prefill_body(client_body(max_completion_tokens=7, min_completion_tokens=2), handoff())
    assert body["stream"] is False
    assert body["max_tokens"] == 1 and body["max_completion_tokens"] == 1
    for dropped in ("stream_options", "min_tokens", "min_completion_tokens"):
        assert dropped not in body


def test_prefill_leg_does_not_touch_the_client_body():
    original = client_body()
    prefill_body(original, handoff())
    assert original == client_body()


def test_nixl_prefill_params():
    assert prefill_body(client_body(), handoff())["kv_transfer_params"] == {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }


def test_nixl_decode_gets_prefill_params_verbatim_and_client_max_tokens():
    returned = {"do_remote_prefill": True, "remote_block_ids": [[1]], "remote_engine_id": "e"}
    body = decode_body(client_body(), handoff(), returned)
    assert body["kv_transfer_params"] == returned
    assert body["max_tokens"] == 7  # the client's own count: decode generates all of them
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_decode_without_prefill_params_recomputes():
    for connector in ("nixl", "moriio"):
        body = decode_body(client_body(kv_transfer_params={"x": 1}), handoff(connector), None)
        assert "kv_transfer_params" not in body


def test_moriio_prefill_params_carry_transfer_id_and_decode_sizes():
    params = prefill_body(client_body(), handoff("moriio", d_dp=2))["kv_transfer_params"]
    assert params["transfer_id"] == "tx-" + HEX
    assert params["remote_dp_size"] == 2 and params["remote_tp_size"] == 4
    assert params["do_remote_decode"] is True and params["do_remote_prefill"] is False


def test_moriio_read_decode_copies_blocks_from_prefill():
    returned = {
        "do_remote_prefill": True,
        "remote_block_ids": [4, 5],
        "remote_engine_id": "10.0.0.1:6301",
        "remote_host": "10.0.0.1",
        "remote_handshake_port": 6301,
        "remote_notify_port": 6105,
        "remote_dp_size": 1,
        "tp_size": 2,
        "transfer_id": "tx-" + HEX,
    }
    body = decode_body(client_body(), handoff("moriio", "read"), returned)
    params = body["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["transfer_id"] == "tx-" + HEX
    assert params["remote_block_ids"] == [4, 5]
    assert params["remote_engine_id"] == "10.0.0.1:6301"
    assert params["remote_dp_size"] == 1 and params["remote_tp_size"] == 2
    assert "remote_dp_rank" not in params
    assert body["max_tokens"] == 7  # not decremented, unlike the upstream toy proxy


def test_moriio_write_decode_needs_no_prefill_answer():
    body = decode_body(client_body(), handoff("moriio", "write", p_dp=2, p_rank=1), None)
    params = body["kv_transfer_params"]
    assert params == {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "transfer_id": "tx-" + HEX,
        "remote_dp_size": 2,
        "remote_tp_size": 2,
        "remote_dp_rank": 1,
    }


def test_moriio_request_id_parses_like_vllm():
    rid = moriio_request_id(P_ZMQ, D_ZMQ, HEX)
    # the regexes of vllm's moriio_common.py
    assert re.search(r"___prefill_addr_(.+?)___decode_addr_", rid).group(1) == P_ZMQ
    assert re.search(r"___decode_addr_(.+)_[0-9a-f]{32}(?:-.*)?$", rid).group(1) == D_ZMQ
    assert (
        re.search(r"___decode_addr_(.+)_[0-9a-f]{32}(?:-.*)?$", f"cmpl-{rid}-0-abcd").group(1)
        == D_ZMQ
    )


def test_headers_same_request_id_on_both_legs_and_dp_rank_when_dp():
    h = handoff("moriio", p_dp=2, p_rank=1)
    prefill, decode = leg_headers(h, "prefill"), leg_headers(h, "decode")
    assert prefill["X-Request-Id"] == decode["X-Request-Id"] == moriio_request_id(P_ZMQ, D_ZMQ, HEX)
    assert prefill["X-data-parallel-rank"] == "1"
    assert "X-data-parallel-rank" not in decode


def test_nixl_request_id_is_plain_hex():
    assert leg_headers(handoff(), "prefill")["X-Request-Id"] == HEX


def test_moriio_without_zmq_addresses_falls_back_to_plain_id():
    h = Handoff("moriio", "read", HEX, Peer(), Peer())
    assert h.request_id == HEX


def test_returned_params():
    assert returned_params({"kv_transfer_params": {"a": 1}}) == {"a": 1}
    assert returned_params({"kv_transfer_params": None}) is None
    assert returned_params({}) is None
    assert returned_params([1]) is None


@pytest.mark.parametrize(
    ("connector", "mode"), [("nixl", "write"), ("foo", "read"), ("nixl", "push")]
)
def test_invalid_combinations(connector, mode):
    with pytest.raises(ValueError):
        check_combination(connector, mode)


def test_valid_combinations():
    for connector, mode in [
        ("nixl", "read"),
        ("moriio", "read"),
        ("moriio", "write"),
        ("nixl", "colocated"),
    ]:
        check_combination(connector, mode)


PARAMS = {"remote_engine_id": "e", "remote_block_ids": [1, 2], "remote_host": "h"}


@pytest.mark.parametrize(
    "connector,mode", [("nixl", "read"), ("moriio", "read"), ("moriio", "write")]
)
@pytest.mark.parametrize("params", [PARAMS, None])
@pytest.mark.parametrize(
    "raw",
    [
        json.dumps(client_body()).encode(),
        b' {"model": "m", "prompt": "h\\u00e9", "stream": true}\n',
        json.dumps(client_body(kv_transfer_params={"x": 1})).encode(),  # the client's own
        json.dumps(client_body()).encode("utf-16"),
    ],
)
def test_decode_bytes_are_the_decode_body(connector, mode, params, raw):
    body = json.loads(raw)
    h = handoff(connector, mode)
    assert json.loads(decode_bytes(raw, body, h, params)) == decode_body(body, h, params)


def test_decode_bytes_splice_the_client_bytes():
    raw = b'{"model": "m", "prompt": "h\\u00e9"}'
    assert decode_bytes(raw, json.loads(raw), handoff(), PARAMS).startswith(raw[:-1])
    assert decode_bytes(raw, json.loads(raw), handoff(), None) is raw


def test_colocated_bytes_are_the_client_body():
    raw = json.dumps(client_body()).encode()
    assert colocated_bytes(raw, json.loads(raw)) is raw
    wide = raw.decode().encode("utf-16")
    assert json.loads(colocated_bytes(wide, json.loads(wide))) == json.loads(raw)
