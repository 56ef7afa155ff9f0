"""Where the stand-in's KV listeners bind and what it advertises, as vLLM decides it: NIXL from
VLLM_NIXL_SIDE_CHANNEL_HOST (default localhost), MoRIIO from host_ip (else the --host address)."""

import json

import pytest

from simulator.config.engine import (
    EngineConfigError,
    EngineSettings,
    parse_kv_transfer_config,
)
from simulator.kv.handoff import prefill_response_params
from simulator.server.registration import registration_message

NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'


def moriio(**extra) -> str:
    return json.dumps(
        {
            "kv_connector": "MoRIIOConnector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {
                "handshake_port": "6301",
                "notify_port": "6105",
                "proxy_ip": "127.0.0.4",
                "proxy_ping_port": "36367",
                **extra,
            },
        }
    )


def engine(raw: str, host: str = "127.0.0.1", env: dict | None = None) -> EngineSettings:
    return EngineSettings(host=host, port=8100, kv=parse_kv_transfer_config(raw, 8100, env or {}))


def test_nixl_side_channel_defaults_to_localhost_whatever_the_http_host():
    settings = engine(NIXL, host="127.0.0.2")
    assert settings.kv_bind_host == settings.kv_advertised_host == "localhost"


def test_nixl_side_channel_host_is_bound_and_advertised_verbatim():
    settings = engine(NIXL, host="0.0.0.0", env={"VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.2"})
    assert settings.kv_bind_host == settings.kv_advertised_host == "127.0.0.2"
    params = prefill_response_params(
        settings.kv, "e", settings.kv_advertised_host, "cmpl-1", "cmpl-1", [1, 2], 20, 1, 0
    )
    assert (params["remote_host"], params["remote_port"]) == ("127.0.0.2", 5600)


def test_moriio_host_ip_is_what_it_binds_registers_and_hands_the_decode():
    settings = engine(moriio(host_ip="127.0.0.2"), host="0.0.0.0")
    assert settings.kv_bind_host == settings.kv_advertised_host == "127.0.0.2"
    assert settings.kv.proxy_ip == "127.0.0.4"
    message = registration_message(settings, settings.kv, settings.kv_advertised_host)
    assert message["http_address"] == "127.0.0.2:8100"
    assert message["zmq_address"] == "host:127.0.0.2,handshake:6301,notify:6105"
    params = prefill_response_params(
        settings.kv, "e", settings.kv_advertised_host, "c", "tx-1", [1], 20, 1, 0
    )
    assert params["remote_host"] == "127.0.0.2"


@pytest.mark.parametrize("host_ip", [None, ""])  # vLLM: `host_ip or get_ip()`
def test_moriio_without_host_ip_uses_the_http_host(host_ip):
    extra = {} if host_ip is None else {"host_ip": host_ip}
    on_node = engine(moriio(**extra), host="127.0.0.3")
    assert on_node.kv_bind_host == on_node.kv_advertised_host == "127.0.0.3"
    everywhere = engine(moriio(**extra), host="0.0.0.0")
    assert (everywhere.kv_bind_host, everywhere.kv_advertised_host) == ("0.0.0.0", "127.0.0.1")


@pytest.mark.parametrize("value", ["node-2.cluster.local", "10.0.0.7", "::1"])
def test_host_names_and_ip_literals_are_taken(value):
    assert engine(NIXL, env={"VLLM_NIXL_SIDE_CHANNEL_HOST": value}).kv_advertised_host == value


@pytest.mark.parametrize("value", ["", "127.0.0.2:5600", "http://127.0.0.2", "node 2", "-x"])
def test_a_malformed_side_channel_host_is_refused_naming_the_variable(value):
    with pytest.raises(EngineConfigError, match="VLLM_NIXL_SIDE_CHANNEL_HOST must be an IP"):
        parse_kv_transfer_config(NIXL, 8100, {"VLLM_NIXL_SIDE_CHANNEL_HOST": value})


@pytest.mark.parametrize("key", ["host_ip", "proxy_ip"])
def test_a_malformed_moriio_address_is_refused_naming_the_key(key):
    with pytest.raises(EngineConfigError, match=f"kv_connector_extra_config.{key} must be"):
        parse_kv_transfer_config(moriio(**{key: "10.0.0.2:6301"}), 8100, {})


def test_only_nixl_and_newer_moriio_export_their_transfer_metrics():
    from simulator.config.engine import EngineSettings, KVTransferSettings

    def prefix(connector: str, moriio_metrics: str = "stats") -> str | None:
        kv = KVTransferSettings(connector=connector)
        return EngineSettings(kv=kv, moriio_metrics=moriio_metrics).transfer_metrics_prefix

    assert prefix("NixlConnector") == "nixl" and prefix("MoRIIOConnector") == "moriio"
    assert prefix("MoRIIOConnector", "none") is None  # older MoRIIO: none
    assert prefix("NixlConnector", "none") == "nixl"  # the knob is MoRIIO's
    assert prefix("ExampleConnector") is None and EngineSettings().transfer_metrics_prefix is None
