import json

import pytest

from connector.kv_config import MoriioPorts, kv_env, kv_transfer_config, kv_transfer_config_json


def test_nixl_is_kv_both_for_every_role():
    for role in ("prefill", "decode", "colocated", "both"):
        assert kv_transfer_config("nixl", role) == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
        }


def test_moriio_producer_and_consumer():
    ports = MoriioPorts(http_port=20005, handshake_port=6301, notify_port=6105)
    p = kv_transfer_config("moriio", "prefill", mode="write", moriio=ports)
    assert p["kv_connector"] == "MoRIIOConnector" and p["kv_role"] == "kv_producer"
    assert p["kv_connector_extra_config"] == {
        "proxy_ip": "127.0.0.1",
        "proxy_ping_port": "36367",
        "http_port": "20005",
        "handshake_port": "6301",
        "notify_port": "6105",
        "read_mode": "false",
    }
    d = kv_transfer_config("moriio", "decode", mode="read", moriio=ports)
    assert d["kv_role"] == "kv_consumer"
    assert d["kv_connector_extra_config"]["read_mode"] == "true"


def test_moriio_env_sets_the_old_mode_switch_too():
    assert kv_env("moriio", "read") == {"VLLM_MORIIO_CONNECTOR_READ_MODE": "1"}
    assert kv_env("moriio", "write") == {"VLLM_MORIIO_CONNECTOR_READ_MODE": "0"}
    assert kv_env("nixl") == {}


def test_errors():
    with pytest.raises(ValueError):
        kv_transfer_config("moriio", "prefill")
    with pytest.raises(ValueError):
        kv_transfer_config("moriio", "both", moriio=MoriioPorts(1, 2, 3))
    with pytest.raises(ValueError):
        kv_transfer_config("lmcache", "prefill")


def test_json_is_compact():
    assert json.loads(kv_transfer_config_json("nixl", "prefill"))["kv_role"] == "kv_both"
    assert " " not in kv_transfer_config_json("nixl", "prefill")
