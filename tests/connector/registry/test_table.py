import pytest

from connector.registry.table import (
    NEW_INTERVAL,
    OLD_INTERVAL,
    Registration,
    RegistryMessageError,
    RegistryTable,
    parse_message,
)

NEW = {
    "type": "P",
    "http_address": "10.0.0.1:20005",
    "zmq_address": "host:10.0.0.1,handshake:6301,notify:6105",
    "dp_size": 1,
    "tp_size": 4,
    "transfer_mode": "WRITE",
}
OLD = {
    "type": "register",
    "role": "D",
    "index": "0",
    "request_address": "http://10.0.0.2:40005/v1/completions",
    "handshake_port": "7301",
    "notify_port": 7501,
    "dp_size": "2",
    "tp_size": 4,
    "transfer_mode": "READ",
}


def test_newer_shape():
    reg = parse_message(NEW)
    assert reg == Registration(
        "prefill", "http://10.0.0.1:20005", NEW["zmq_address"], 1, 4, "write", NEW_INTERVAL
    )


def test_older_shape_builds_the_zmq_address_and_base_url():
    reg = parse_message(OLD)
    assert reg.role == "decode"
    assert reg.url == "http://10.0.0.2:40005"
    assert reg.zmq_address == "host:10.0.0.2,handshake:7301,notify:7501"
    assert (reg.dp_size, reg.tp_size, reg.mode, reg.interval) == (2, 4, "read", OLD_INTERVAL)


def test_bytes_keys_and_values_are_accepted():
    raw = {k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in NEW.items()}
    assert parse_message(raw) == parse_message(NEW)


def test_hello_is_ignored():
    assert parse_message({"type": "HELLO"}) is None


def test_missing_mode_takes_the_default():
    msg = dict(NEW)
    del msg["transfer_mode"]
    assert parse_message(msg, default_mode="write").mode == "write"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"type": "X"}, "type"),
        ({"http_address": None}, "http_address"),
        ({"transfer_mode": "PUSH"}, "transfer_mode"),
        ({"dp_size": "two"}, "dp_size"),
    ],
)
def test_bad_messages_name_the_field(change, field):
    msg = dict(NEW)
    msg.update(change)
    with pytest.raises(RegistryMessageError, match=field):
        parse_message(msg)


def test_bad_older_messages():
    with pytest.raises(RegistryMessageError, match="role"):
        parse_message({**OLD, "role": "X"})
    with pytest.raises(RegistryMessageError, match="request_address"):
        parse_message({**OLD, "request_address": "nowhere"})
    with pytest.raises(RegistryMessageError):
        parse_message(["not", "a", "map"])


def test_expiry_after_three_intervals_with_a_fake_clock():
    table = RegistryTable()
    reg = parse_message(NEW)
    assert table.beat(reg, now=100.0) == "added"
    assert table.expire(now=100.0 + 3 * NEW_INTERVAL - 0.01) == []
    assert table.beat(reg, now=105.0) == "refreshed"
    assert table.expire(now=105.0 + 2.9 * NEW_INTERVAL) == []
    assert table.expire(now=105.0 + 3 * NEW_INTERVAL) == [reg]
    assert reg.url not in table and len(table) == 0


def test_older_shape_gets_its_longer_interval():
    table = RegistryTable()
    reg = parse_message(OLD)
    table.beat(reg, now=0.0)
    assert table.expire(now=3 * NEW_INTERVAL + 1) == []  # 10 s: still alive at 5 s beats
    assert table.expire(now=3 * OLD_INTERVAL) == [reg]


def test_reregistration_with_another_mode_is_a_change():
    table = RegistryTable()
    table.beat(parse_message(NEW), 0.0)
    assert table.beat(parse_message({**NEW, "transfer_mode": "READ"}), 1.0) == "changed"


def test_interval_scale_shrinks_expiry():
    table = RegistryTable(interval_scale=0.01)
    table.beat(parse_message(NEW), 0.0)
    assert table.expire(0.08) == []
    assert len(table.expire(0.09)) == 1
