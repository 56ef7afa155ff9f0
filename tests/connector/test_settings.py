import pytest

from connector.settings import FlagInstance, ProxySettings


def test_flag_instance_takes_an_optional_zmq_address():
    assert FlagInstance.parse("http://h:1/") == FlagInstance("http://h:1", None)
    zmq = "host:h,handshake:6301,notify:6105"
    assert FlagInstance.parse(f"http://h:1#{zmq}") == FlagInstance("http://h:1", zmq)
    with pytest.raises(ValueError):
        FlagInstance.parse("h:1")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"connector": "nixl", "mode": "write"},
        {"mode": "colocated", "prefill": (FlagInstance("http://p"),)},
        {"mode": "read", "instance": (FlagInstance("http://c"),)},
        {"prefill": (FlagInstance("http://x"),), "decode": (FlagInstance("http://x"),)},
        {"policy": "random"},
        {"hold_queue": -1},
    ],
)
def test_invalid_settings(kwargs):
    with pytest.raises(ValueError):
        ProxySettings(**kwargs)


def test_valid_settings():
    ProxySettings(connector="moriio", mode="write")
    ProxySettings(mode="colocated", instance=(FlagInstance("http://c"),))
