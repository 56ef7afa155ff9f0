import pytest

from simulator.config.engine import EngineConfigError, parse_kv_transfer_config
from simulator.engine.request import KVRole
from simulator.kv.handoff import parse_peer, peers_from_request_id, plan_handoff
from simulator.protocol.request import RequestError

NIXL = parse_kv_transfer_config(
    '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
    8000,
    {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"},
)


def moriio(read: bool):
    extra = '{"handshake_port":"6301","notify_port":"6105","read_mode":"%s"}' % (
        "true" if read else "false"
    )
    return parse_kv_transfer_config(
        '{"kv_connector":"MoRIIOConnector","kv_role":"kv_consumer",'
        f'"kv_connector_extra_config":{extra}}}',
        8000,
        {},
    )


def test_nixl_settings_take_the_side_channel_port_from_env():
    assert NIXL.kv_port == 5601 and NIXL.read_mode and not NIXL.registers


def test_moriio_mode_from_extra_config_wins_over_env():
    kv = parse_kv_transfer_config(
        '{"kv_connector":"MoRIIOConnector","kv_connector_extra_config":{"read_mode":"false"}}',
        8000,
        {"VLLM_MORIIO_CONNECTOR_READ_MODE": "1"},
    )
    assert kv.transfer_mode == "WRITE"
    old = parse_kv_transfer_config(
        '{"kv_connector":"MoRIIOConnector"}', 8000, {"VLLM_MORIIO_CONNECTOR_READ_MODE": "1"}
    )
    assert old.transfer_mode == "READ"  # vLLM 0.16 read only the env var


def test_bad_policy_is_refused():
    with pytest.raises(EngineConfigError, match="kv_load_failure_policy"):
        parse_kv_transfer_config(
            '{"kv_connector":"NixlConnector","kv_load_failure_policy":"retry"}', 1, {}
        )


def test_peers_come_from_the_moriio_request_id_header():
    header = (
        "___prefill_addr_host:10.0.0.1,handshake:6301,notify:6105"
        "___decode_addr_host:10.0.0.2,handshake:7301,notify:7501_" + "a" * 32
    )
    prefill, decode = peers_from_request_id(header)
    assert (prefill.host, prefill.handshake, prefill.notify) == ("10.0.0.1", 6301, 6105)
    assert decode.notify == 7501
    assert peers_from_request_id("plain-id") == (None, None)
    assert parse_peer("host:x,handshake:1") is None


def test_nixl_prefill_and_decode_roles():
    prefill = plan_handoff({"do_remote_decode": True}, NIXL, "cmpl-1", {})
    assert prefill.role is KVRole.REMOTE_DECODE and prefill.key == "cmpl-1"
    params = {
        "do_remote_prefill": True,
        "remote_block_ids": [[1, 2]],
        "remote_engine_id": "e",
        "remote_request_id": "cmpl-1",
        "remote_host": "127.0.0.1",
        "remote_port": 5600,
    }
    decode = plan_handoff(params, NIXL, "cmpl-2", {})
    assert decode.role is KVRole.REMOTE_PREFILL and decode.remote.block_ids == [1, 2]
    assert not decode.remote.write


def test_invalid_nixl_params_and_no_connector_fall_back_to_local():
    assert plan_handoff({"do_remote_prefill": True}, NIXL, "x", {}).role is KVRole.LOCAL
    assert plan_handoff({"do_remote_decode": True}, None, "x", {}).role is KVRole.LOCAL


def test_moriio_write_decode_finds_the_prefill_notify_port_in_the_header():
    header = {
        "X-Request-Id": "___prefill_addr_host:h,handshake:1,notify:2"
        "___decode_addr_host:d,handshake:3,notify:4_" + "b" * 32
    }
    plan = plan_handoff(
        {"do_remote_prefill": True, "transfer_id": "tx-1"}, moriio(False), "c", header
    )
    assert plan.remote.write and (plan.remote.host, plan.remote.port) == ("h", 2)


def test_moriio_read_decode_needs_blocks_and_an_address():
    with pytest.raises(RequestError, match="remote_block_ids"):
        plan_handoff(
            {
                "do_remote_prefill": True,
                "transfer_id": "t",
                "remote_host": "h",
                "remote_handshake_port": 1,
            },
            moriio(True),
            "c",
            {},
        )
    with pytest.raises(RequestError, match="no prefill address"):
        plan_handoff({"do_remote_prefill": True, "transfer_id": "t"}, moriio(True), "c", {})
