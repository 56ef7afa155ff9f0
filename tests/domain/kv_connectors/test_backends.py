"""Each KV connector's backend: its facts, its kv-transfer-config and env, its legs, and the
registry that finds it (domain/kv_connectors/)."""

import json

import pytest

import domain.kv_connectors as kv
from domain.kv_connectors.base import InstanceKv, KvPorts
from domain.kv_connectors.moriio import moriio_request_id
from domain.modes import Connector, Mode, Role

NIXL, MORIIO = kv.backend_for("NixlConnector"), kv.backend_for("MoRIIOConnector")
RENDERED_ONLY = ("MooncakeConnector", "LMCacheConnectorV1", "P2pNcclConnector")
MORIIO_PORTS = KvPorts(http=20005, handshake=6301, notify=6105)


def test_every_connector_spelled_in_the_enum_has_one_backend_and_no_more():
    assert set(kv.names()) == {c.value for c in Connector}
    assert [b.connector for b in kv.all_backends()] == list(kv.names())
    assert kv.names()[0] == "NixlConnector"  # the default is listed first


@pytest.mark.parametrize(
    "fact, owners",
    [
        ("has_modes", {"MoRIIOConnector"}),
        ("bidirectional_kv", {"NixlConnector"}),
        ("role_switch", {"NixlConnector"}),
        ("registers", {"MoRIIOConnector"}),
        ("prefix_caching_off", {"MoRIIOConnector"}),
        ("amd_only", {"MoRIIOConnector"}),
        ("shared_filesystem", {"ExampleConnector"}),
        ("owned_extra_keys", {"MoRIIOConnector"}),
        ("transfer_id", {"MoRIIOConnector"}),
        ("merges_blocks", {"MoRIIOConnector"}),
        ("rdma_in_node", {"MoRIIOConnector"}),
        ("metrics_optional", {"MoRIIOConnector"}),
        ("metric_prefix", {"NixlConnector", "MoRIIOConnector"}),
        ("proxy_name", {"NixlConnector", "MoRIIOConnector"}),
    ],
)
def test_who_has_each_fact(fact, owners):
    assert {b.connector for b in kv.offering(fact)} == owners


def test_ports_each_connector_needs():
    assert NIXL.kv_ports == {"side_channel"}
    assert MORIIO.kv_ports == {"handshake", "notify"}
    assert all(not kv.backend_for(c).kv_ports for c in (*RENDERED_ONLY, "ExampleConnector"))


def test_the_proxy_routes_rendered_only_connectors_in_nixls_shape():
    assert (NIXL.routed_as, MORIIO.routed_as) == ("nixl", "moriio")
    for name in (*RENDERED_ONLY, "ExampleConnector"):
        backend = kv.backend_for(name)
        assert backend.proxy_name is None and backend.routed_as == "nixl"
    assert kv.proxy_names() == ("nixl", "moriio")
    assert kv.proxy_backend("moriio") is MORIIO


def test_hand_off_model_and_metrics():
    assert (NIXL.kv_hold_timeout_s, MORIIO.kv_hold_timeout_s) == (480.0, 3600.0)
    assert kv.metric_prefixes() == ("nixl", "moriio")
    assert kv.by_metric_prefix("moriio") is MORIIO and kv.by_metric_prefix("lmcache") is None
    assert "num_notifications_after_expiry" in NIXL.metric_help
    assert "num_notifications_after_expiry" not in MORIIO.metric_help


def test_an_unknown_connector_is_refused_naming_the_known_ones():
    with pytest.raises(kv.UnknownConnector, match="unknown connector 'Kafka'; known: Nixl"):
        kv.backend_for("Kafka")
    with pytest.raises(ValueError, match="known: nixl, moriio"):
        kv.proxy_backend("lmcache")
    assert kv.lookup("Kafka") is None and kv.lookup(None) is None
    assert kv.stand_in_backend("OffloadingConnector").transfer_id is False


def test_nixl_is_kv_both_for_every_role_and_sets_its_side_channel():
    for role in (Role.PREFILL, Role.DECODE):
        config = NIXL.kv_transfer_config(InstanceKv(role, extra={"backends": ["UCX"]}))
        assert config == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"backends": ["UCX"]},
        }
    inst = InstanceKv(Role.DECODE, ports=KvPorts(side_channel=5601), node_address="10.0.0.2")
    assert NIXL.kv_env(inst) == {
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.2",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": "5601",
    }
    assert NIXL.kv_env(InstanceKv(Role.DECODE)) == {}


def test_moriio_producer_and_consumer():
    p = MORIIO.kv_transfer_config(InstanceKv(Role.PREFILL, mode=Mode.WRITE, ports=MORIIO_PORTS))
    assert p["kv_connector"] == "MoRIIOConnector" and p["kv_role"] == "kv_producer"
    assert p["kv_connector_extra_config"] == {
        "proxy_ip": "127.0.0.1",
        "proxy_ping_port": "36367",
        "http_port": "20005",
        "handshake_port": "6301",
        "notify_port": "6105",
        "read_mode": "false",
    }
    d = MORIIO.kv_transfer_config(
        InstanceKv(Role.DECODE, mode=Mode.READ, ports=MORIIO_PORTS, node_address="10.0.0.3")
    )
    assert d["kv_role"] == "kv_consumer"
    assert d["kv_connector_extra_config"]["read_mode"] == "true"
    assert d["kv_connector_extra_config"]["host_ip"] == "10.0.0.3"
    assert " " not in json.dumps(p, separators=(",", ":"))


def test_moriio_env_sets_the_old_mode_switch_too():
    assert MORIIO.kv_env(InstanceKv(Role.PREFILL, mode=Mode.READ)) == {
        "VLLM_MORIIO_CONNECTOR_READ_MODE": "1"
    }
    assert MORIIO.kv_env(InstanceKv(Role.PREFILL, mode=Mode.WRITE)) == {
        "VLLM_MORIIO_CONNECTOR_READ_MODE": "0"
    }
    assert MORIIO.kv_env(InstanceKv(Role.ENCODE)) == {}


def test_moriio_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="needs http, handshake and notify ports"):
        MORIIO.kv_transfer_config(InstanceKv(Role.PREFILL))
    with pytest.raises(ValueError, match="either prefill"):
        MORIIO.kv_transfer_config(InstanceKv(Role.COLOCATED, ports=MORIIO_PORTS))


def test_rendered_only_connectors_are_producer_and_consumer():
    for name in RENDERED_ONLY:
        backend = kv.backend_for(name)
        assert backend.kv_transfer_config(InstanceKv(Role.PREFILL)) == {
            "kv_connector": name,
            "kv_role": "kv_producer",
        }
        assert backend.kv_transfer_config(InstanceKv(Role.DECODE))["kv_role"] == "kv_consumer"
        assert backend.kv_env(InstanceKv(Role.DECODE)) == {}


def test_example_gets_a_shared_directory_unless_the_operator_gave_one():
    example = kv.backend_for("ExampleConnector")
    config = example.kv_transfer_config(InstanceKv(Role.DECODE, deployment="d1"))
    assert config["kv_connector_extra_config"] == {"shared_storage_path": "/tmp/pdctl-kv-d1"}
    own = InstanceKv(Role.DECODE, deployment="d1", extra={"shared_storage_path": "/mnt/kv"})
    assert example.kv_transfer_config(own)["kv_connector_extra_config"] == {
        "shared_storage_path": "/mnt/kv"
    }


class _Legs:
    mode = "read"
    request_hex = "ab" * 16
    transfer_id = "tx-" + "ab" * 16
    prefill_dp_rank = 1

    class prefill:
        zmq_address, dp_size, tp_size = "host:p,handshake:1,notify:2", 2, 4

    class decode:
        zmq_address, dp_size, tp_size = "host:d,handshake:3,notify:4", 1, 8


def test_nixl_legs_relay_the_prefills_params():
    base = {"do_remote_decode": True}
    assert NIXL.request_id(_Legs) == "ab" * 16
    assert NIXL.prefill_params(base, _Legs, None) is base
    assert NIXL.prefill_params(base, _Legs, {"pull": 1}) == {"pull": 1}
    assert NIXL.decode_params(_Legs, {"remote_block_ids": [1]}) == {"remote_block_ids": [1]}
    assert NIXL.decode_params(_Legs, {}) is None


def test_moriio_legs_carry_one_transfer_id_and_both_addresses():
    assert MORIIO.request_id(_Legs) == moriio_request_id(
        _Legs.prefill.zmq_address, _Legs.decode.zmq_address, "ab" * 16
    )
    params = MORIIO.prefill_params({"do_remote_decode": True}, _Legs, {"pull": 1})
    assert params == {
        "do_remote_decode": True,
        "transfer_id": _Legs.transfer_id,
        "remote_dp_size": 1,
        "remote_tp_size": 8,
    }
    decode = MORIIO.decode_params(_Legs, {"remote_block_ids": [7], "other": 1})
    assert decode == {
        "do_remote_decode": False,
        "do_remote_prefill": True,
        "transfer_id": _Legs.transfer_id,
        "remote_dp_size": 2,
        "remote_tp_size": 4,
        "remote_dp_rank": 1,
        "remote_block_ids": [7],
    }
    assert MORIIO.decode_params(_Legs, None) is None  # read mode, nothing handed over


def test_a_registered_backend_is_found_everywhere_and_can_be_removed():
    class Fake(kv.KvConnectorBackend):
        connector, label, proxy_name, has_modes = "FakeConnector", "Fake", "fake", True

    try:
        fake = kv.register(Fake())
        assert kv.backend_for("FakeConnector") is fake and kv.proxy_backend("fake") is fake
        assert fake in kv.offering("has_modes") and "fake" in kv.proxy_names()
    finally:
        kv.unregister("FakeConnector")
    assert kv.lookup("FakeConnector") is None
    with pytest.raises(ValueError, match="names its connector"):
        kv.register(kv.KvConnectorBackend())
