"""Every field of a registration is range-checked; any msgpack value yields a registration
or a refusal naming a field, never another exception (a seeded generator of hostile values)."""

import math
import random

import msgpack
import pytest

from connector.registry.message import (
    MAX_MESSAGE_BYTES,
    Registration,
    RegistryMessageError,
    parse_message,
)
from connector.registry.table import RegistryListener, unpack

NEW = {
    "type": "D",
    "http_address": "127.0.0.1:30005",
    "zmq_address": "host:127.0.0.1,handshake:7301,notify:7501",
    "dp_size": 1,
    "tp_size": 4,
    "transfer_mode": "READ",
}
OLD = {
    "type": "register",
    "role": "P",
    "index": "0",
    "request_address": "http://10.0.0.1:20005/v1/completions",
    "handshake_port": "6301",
    "notify_port": 6105,
    "dp_size": "2",
    "tp_size": 4,
    "transfer_mode": "WRITE",
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"dp_size": math.inf}, "dp_size"),
        ({"dp_size": -math.inf}, "dp_size"),
        ({"dp_size": math.nan}, "dp_size"),
        ({"dp_size": 0}, "dp_size"),
        ({"dp_size": -5}, "dp_size"),
        ({"dp_size": 2**63}, "dp_size"),
        ({"dp_size": 1.5}, "dp_size"),
        ({"dp_size": True}, "dp_size"),
        ({"tp_size": 0}, "tp_size"),
        ({"tp_size": 10**6}, "tp_size"),
        ({"tp_size": "4 "}, "tp_size"),
        ({"http_address": "127.0.0.1:-1"}, "http_address"),
        ({"http_address": f"127.0.0.1:{2**64 - 1}"}, "http_address"),
        ({"http_address": "127.0.0.1:0"}, "http_address"),
        ({"http_address": "http://user@127.0.0.1:1"}, "http_address"),
        ({"http_address": "http://user:pw@127.0.0.1:1"}, "http_address"),
        ({"http_address": "127.0.0.1:1/v1/x"}, "http_address"),
        ({"http_address": "127.0.0.1:1?x=1"}, "http_address"),
        ({"http_address": "127.0.0.1\n:1"}, "http_address"),
        ({"http_address": "evil host:1"}, "http_address"),
        ({"http_address": "a" * 300 + ":1"}, "http_address"),
        ({"http_address": 5}, "http_address"),
        ({"zmq_address": "host:127.0.0.1,handshake:-1,notify:1"}, "zmq_address"),
        ({"zmq_address": "host:127.0.0.1,handshake:70000,notify:1"}, "zmq_address"),
        ({"zmq_address": "host:a@b,handshake:1,notify:1"}, "zmq_address"),
        ({"zmq_address": "host:127.0.0.1,handshake:1"}, "zmq_address"),
        ({"zmq_address": ["x"]}, "zmq_address"),
        ({"transfer_mode": "SIDEWAYS"}, "transfer_mode"),
        ({"transfer_mode": 1}, "transfer_mode"),
        ({"type": "Q"}, "type"),
    ],
)
def test_a_field_out_of_range_is_refused_by_name(change, field):
    with pytest.raises(RegistryMessageError) as err:
        parse_message({**NEW, **change})
    assert err.value.field == field


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"handshake_port": -1}, "handshake_port"),
        ({"handshake_port": 2**64 - 1}, "handshake_port"),
        ({"notify_port": math.inf}, "notify_port"),
        ({"notify_port": "0"}, "notify_port"),
        ({"request_address": "http://u@10.0.0.1:1/v1/completions"}, "request_address"),
        ({"request_address": "http://10.0.0.1:1/admin"}, "request_address"),
        ({"role": "Q"}, "role"),
        ({"dp_size": "1e9"}, "dp_size"),
    ],
)
def test_the_older_shape_is_checked_as_strictly(change, field):
    with pytest.raises(RegistryMessageError) as err:
        parse_message({**OLD, **change})
    assert err.value.field == field


def test_the_shapes_of_protocol_md_still_register():
    assert parse_message(NEW) == Registration(
        "decode", "http://127.0.0.1:30005", NEW["zmq_address"], 1, 4, "read", 3.0
    )
    old = parse_message(OLD)
    assert (old.role, old.url, old.dp_size, old.tp_size, old.mode) == (
        "prefill",
        "http://10.0.0.1:20005",
        2,
        4,
        "write",
    )
    assert old.zmq_address == "host:10.0.0.1,handshake:6301,notify:6105"
    # the stand-in's read-mode decode has no notify port: it sends 0
    assert parse_message({**NEW, "zmq_address": "host:127.0.0.1,handshake:7301,notify:0"})
    # a registration round-tripped through msgpack as bytes
    raw = {k.encode(): (v.encode() if isinstance(v, str) else v) for k, v in NEW.items()}
    assert parse_message(unpack(msgpack.packb(raw, use_bin_type=True))) == parse_message(NEW)


def _hostile_value(rng: random.Random, depth: int = 0):
    kinds = ["int", "bigint", "float", "str", "bytes", "bool", "none"]
    if depth < 3:
        kinds += ["list", "map"]
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, -1, 1, 65535, 65536, -(2**63), 2**64 - 1])
    if kind == "bigint":
        return rng.randrange(-(2**63), 2**64)
    if kind == "float":
        return rng.choice([math.inf, -math.inf, math.nan, 1e308, -0.0, 3.5])
    if kind == "str":
        return rng.choice(["", "P", "D", "READ", "127.0.0.1:1", "host:x,handshake:1,notify:2"]) + (
            "".join(chr(rng.randrange(0, 0x2FFF)) for _ in range(rng.randrange(0, 8)))
        )
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_hostile_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    keys = list(NEW) + list(OLD) + ["x", ""]
    return {rng.choice(keys): _hostile_value(rng, depth + 1) for _ in range(rng.randrange(0, 9))}


def _mutated(rng: random.Random) -> dict:
    base = dict(rng.choice([NEW, OLD]))
    for _ in range(rng.randrange(1, 4)):
        base[rng.choice(list(base))] = _hostile_value(rng, 2)
    return base


def test_any_msgpack_value_yields_a_registration_or_a_refusal():
    rng = random.Random(20261201)
    outcomes = {"registered": 0, "refused": 0}

    def registered(reg, peer):
        assert isinstance(reg, Registration)
        assert 1 <= reg.dp_size <= 1024 and 1 <= reg.tp_size <= 1024
        outcomes["registered"] += 1

    def refused(reason, detail):
        assert reason == "malformed" and detail
        outcomes["refused"] += 1

    listener = RegistryListener("127.0.0.1", 0, registered, refused, lambda: None, 1.0)
    for i in range(5000):
        value = _mutated(rng) if i % 2 else _hostile_value(rng)
        payload = msgpack.packb(value, use_bin_type=bool(i % 3))
        listener.handle(payload, "127.0.0.1")  # raises nothing
    for _ in range(500):  # and raw bytes that are not msgpack at all
        listener.handle(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))))
    assert outcomes["refused"] > 1000 and outcomes["registered"] > 50, outcomes


def test_an_oversized_message_is_refused_before_it_is_unpacked():
    with pytest.raises(ValueError, match="more than"):
        unpack(b"\x00" * (MAX_MESSAGE_BYTES + 1))
