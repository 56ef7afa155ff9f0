"""The proxy's settings model: each refusal names its field, the environment is read only for
the fields marked so, and the argv rendered from it says what was set."""

import json

import pytest
from pydantic import ValidationError

from connector.flags import argv
from connector.legs.retry import RetrySettings
from connector.registry.trust import ExpectedInstance
from connector.settings import FlagInstance, ProxyEnvironment, ProxySettings, read_settings
from domain.measures.slo import ItlStat, SloTargets

EXPECTED = [
    {"url": "http://127.0.0.1:20005", "role": "prefill", "modes": ["read"], "zmq_address": None}
]


def refused_field(**kwargs) -> str:
    with pytest.raises(ValidationError) as err:
        ProxySettings(**{"port": 0, **kwargs})
    return ProxySettings.error_field(err.value.errors()[0])


def test_flag_instance_takes_an_optional_zmq_address():
    assert FlagInstance.parse("http://h:1/") == FlagInstance("http://h:1", None)
    zmq = "host:h,handshake:6301,notify:6105"
    assert FlagInstance.parse(f"http://h:1#{zmq}") == FlagInstance("http://h:1", zmq)
    assert FlagInstance.parse(f"http://h:1#{zmq}").text == f"http://h:1#{zmq}"
    with pytest.raises(ValueError):
        FlagInstance.parse("h:1")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        # one field out of its type or bounds
        ({"port": 70_000}, "port"),
        ({"connector": "mooncake"}, "connector"),
        ({"mode": "both"}, "mode"),
        ({"policy": "random"}, "policy"),
        ({"hold_queue": -1}, "hold_queue"),
        ({"hold_deadline": -1}, "hold_deadline"),
        ({"prefill_timeout": 0}, "prefill_timeout"),
        ({"slo_ttft_ms": 0}, "slo_ttft_ms"),
        ({"slo_itl_ms": float("inf")}, "slo_itl_ms"),
        ({"itl_slo_stat": "median"}, "itl_slo_stat"),
        ({"prefill": ["h:1"]}, "prefill"),
        ({"registry_allow": ["not-an-address"]}, "registry_allow"),
        ({"registry_expected": "[{"}, "registry_expected"),
        ({"registry_expected": json.dumps([{"role": "prefill"}])}, "registry_expected"),
        ({"header_timeout": 3601}, "header_timeout"),
        ({"heartbeat_scale": 0}, "heartbeat_scale"),
        # rules between fields, each at the field it is about
        ({"connector": "nixl", "mode": "write"}, "mode"),
        ({"mode": "colocated", "prefill": ["http://p"]}, "prefill"),
        ({"mode": "colocated", "decode": ["http://d"]}, "decode"),
        ({"mode": "read", "instance": ["http://c"]}, "instance"),
        ({"prefill": ["http://x"], "decode": ["http://x/"]}, "decode"),
        ({"connector": "moriio", "bidirectional_kv": True}, "bidirectional_kv"),
    ],
)
def test_each_refusal_names_its_field(kwargs, field):
    assert refused_field(**kwargs) == field


def test_a_rule_between_fields_says_which_and_why():
    with pytest.raises(ValidationError) as err:
        ProxySettings(port=0, connector="nixl", mode="write")
    [error] = err.value.errors()
    assert error["ctx"]["field"] == "mode"
    assert "NIXL has no write mode" in error["ctx"]["message"]
    assert "mode: NIXL has no write mode" in str(err.value)


def test_valid_settings_and_what_the_proxy_reads_from_them():
    ProxySettings(port=0, connector="moriio", mode="write")
    s = ProxySettings(
        port=0,
        mode="colocated",
        instance=["http://c/"],
        registry_port=-1,
        health_interval=0,
        slo_ttft_ms=500,
        itl_slo_stat="max",
        retry_attempts=4,
        retry_backoff=0.8,
    )
    assert s.instance == (FlagInstance("http://c"),)
    assert s.registry_port is None and s.health_interval is None  # -1 and 0 turn them off
    assert s.default_registry_mode == "read"
    assert s.slo == SloTargets(500.0, None, None, ItlStat.MAX)
    assert s.retry == RetrySettings(attempts=4, backoff_s=0.8, backoff_max_s=0.8)
    with pytest.raises(ValidationError):  # frozen: one object, built once
        s.port = 1


def test_the_registrations_to_expect_are_read_from_their_json():
    s = ProxySettings(port=0, connector="moriio", registry_expected=json.dumps(EXPECTED))
    [entry] = s.registry_expected or ()
    assert isinstance(entry, ExpectedInstance) and entry.url == "http://127.0.0.1:20005"
    assert ProxySettings(port=0, registry_expected="").registry_expected is None


def test_the_environment_gives_only_the_fields_marked_so(monkeypatch, tmp_path):
    assert set(ProxyEnvironment.model_fields) == {"admin_token", "registry_expected", "runtime_dir"}
    monkeypatch.setenv("PDCTL_ADMIN_TOKEN", "s3cret")
    monkeypatch.setenv("PDCTL_REGISTRY_EXPECTED", json.dumps(EXPECTED))
    monkeypatch.setenv("PDCTL_RUNTIME_DIR", str(tmp_path))
    # The control plane's own variables are not the proxy's: its port, its body limit.
    monkeypatch.setenv("PDCTL_PORT", "9999")
    monkeypatch.setenv("PDCTL_MAX_BODY_BYTES", "2048")
    s = read_settings({"port": 1})
    assert s.admin_token == "s3cret" and s.runtime_dir == tmp_path
    assert [e.url for e in s.registry_expected or ()] == ["http://127.0.0.1:20005"]
    assert s.port == 1 and s.max_body_bytes == 64 << 20
    assert read_settings({"port": 1, "admin_token": "given"}).admin_token == "given"
    monkeypatch.setenv("PDCTL_ADMIN_TOKEN", "")  # empty counts as unset, as click had it
    assert read_settings({"port": 1}).admin_token is None
    assert ProxySettings(port=1).admin_token is None  # built in process: no environment


def test_argv_says_what_was_set_and_nothing_else():
    s = ProxySettings(
        port=8000,
        mode="colocated",
        registry_port=None,
        hold_deadline=2.5,
        hold_queue=10,
        slo_ttft_ms=None,
        ttft_parts=False,
        instance=["http://a", "http://b#host:h"],
        admin_token="secret",
        health_interval=None,
    )
    assert argv(s) == [
        "--port", "8000",
        "--mode", "colocated",
        "--registry-port", "-1",
        "--hold-queue", "10",
        "--hold-deadline", "2.5",
        "--instance", "http://a",
        "--instance", "http://b#host:h",
        "--no-ttft-parts",
        "--health-interval", "0",
    ]  # fmt: skip
    assert "secret" not in argv(s)  # what the environment hands over never goes to argv
    assert argv(ProxySettings(port=1, bidirectional_kv=True, kv_blocks_ttl=90.0)) == [
        "--port", "1", "--bidirectional-kv", "--kv-blocks-ttl", "90",
    ]  # fmt: skip
