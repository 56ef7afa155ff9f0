"""What the registry believes, on a clock passed in: pinned expectations, allowed senders,
claims probed before they count, refusals that name the field."""

import pytest

from connector.registry.gate import RegistryGate
from connector.registry.message import Registration, parse_message
from connector.registry.table import RegistryTable
from connector.registry.trust import Expectations, SenderAllowlist, expected_instance

DECODE = {
    "type": "D",
    "http_address": "127.0.0.1:30005",
    "zmq_address": "host:127.0.0.1,handshake:7301,notify:7501",
    "tp_size": 1,
    "transfer_mode": "READ",
}
PREFILL = {**DECODE, "type": "P", "http_address": "127.0.0.1:20005"}
PREFILL["zmq_address"] = "host:127.0.0.1,handshake:6301,notify:6105"


def reg(message: dict, **change) -> Registration:
    return parse_message({**message, **change})


def expectation(message: dict, modes=("read",)) -> dict:
    r = reg(message)
    return {
        "url": r.url,
        "role": r.role,
        "modes": list(modes),
        "zmq_address": r.zmq_address,
        "tp_size": r.tp_size,
        "dp_size": r.dp_size,
    }


def pinned_gate(*expected: dict) -> RegistryGate:
    return RegistryGate(RegistryTable(), SenderAllowlist(), Expectations.from_json(list(expected)))


def admit(gate: RegistryGate, r: Registration, now: float = 0.0) -> None:
    assert gate.judge(r, "127.0.0.1", now, configured=False).kind == "admit"
    assert gate.confirmed(r.url, now) == r


def test_an_expected_registration_is_admitted_then_refreshed():
    gate = pinned_gate(expectation(DECODE), expectation(PREFILL))
    admit(gate, reg(DECODE))
    assert gate.judge(reg(DECODE), "127.0.0.1", 1.0, False).kind == "refresh"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"http_address": "127.0.0.1:30006"}, "http_address"),  # not launched: a rogue
        ({"type": "P"}, "type"),  # the decode's URL re-registered as a prefill
        ({"transfer_mode": "WRITE"}, "transfer_mode"),  # flapping into the other mode
        ({"zmq_address": "host:127.0.0.1,handshake:9999,notify:7501"}, "zmq_address"),
        ({"zmq_address": "host:127.0.0.9,handshake:7301,notify:7501"}, "zmq_address"),
        ({"tp_size": 2}, "tp_size"),
        ({"dp_size": 2}, "dp_size"),
    ],
)
def test_a_registration_unlike_the_launched_one_is_refused_naming_the_field(change, field):
    gate = pinned_gate(expectation(DECODE))
    admit(gate, reg(DECODE))
    verdict = gate.judge(reg(DECODE, **change), "127.0.0.1", 1.0, False)
    assert verdict.kind == "refuse" and verdict.refusal.field == field
    assert gate.table.get(reg(DECODE).url) == reg(DECODE)  # the real one stands
    (record,) = gate.refusals.values()
    assert record.field == field and record.count == 1


def test_refusals_are_recorded_once_per_url_and_field_with_a_count():
    gate = pinned_gate(expectation(DECODE))
    rogue = reg(DECODE, http_address="127.0.0.1:1")
    for t in range(5):
        gate.judge(rogue, "127.0.0.1", float(t), False)
    (record,) = gate.refusals.values()
    assert (record.count, record.first, record.last) == (5, 0.0, 4.0)


def test_a_switch_the_controller_expects_lets_the_mode_move():
    gate = pinned_gate(expectation(DECODE))
    admit(gate, reg(DECODE))
    widened = Expectations.from_json([expectation(DECODE, modes=("read", "write"))])
    assert gate.set_expectations(widened, 1.0) == []
    assert gate.judge(reg(DECODE, transfer_mode="WRITE"), "127.0.0.1", 2.0, False).kind == "change"


def test_narrowed_expectations_drop_the_instances_they_refuse():
    gate = pinned_gate(expectation(DECODE), expectation(PREFILL))
    admit(gate, reg(DECODE))
    admit(gate, reg(PREFILL))
    dropped = gate.set_expectations(Expectations.from_json([expectation(PREFILL)]), 1.0)
    assert dropped == [reg(DECODE).url] and reg(DECODE).url not in gate.table
    # Not told as a refusal: the controller stopped it (issue 34's story reported every
    # instance a rollout had stopped as "not an instance this deployment launched").
    assert gate.refusals == {}
    # One that still runs is refused at its next heartbeat.
    assert gate.judge(reg(DECODE), "127.0.0.1", 2.0, False).kind == "refuse"
    (record,) = gate.refusals.values()
    assert (record.url, record.field, record.count) == (reg(DECODE).url, "http_address", 1)


def test_a_registration_flood_at_start_never_crowds_out_the_expected_instances():
    gate = pinned_gate(expectation(DECODE), expectation(PREFILL))
    for i in range(5000):
        fake = reg(DECODE, http_address=f"127.0.{i // 250}.{i % 250 + 1}:9")
        assert gate.judge(fake, "127.0.0.1", 0.0, False).kind == "refuse"
    assert not gate.pending
    admit(gate, reg(DECODE))
    admit(gate, reg(PREFILL))


def test_standalone_new_claims_wait_in_a_small_pending_set():
    gate = RegistryGate(RegistryTable(), SenderAllowlist(), None, max_pending=4)
    fakes = [reg(DECODE, http_address=f"127.0.0.{i + 1}:9") for i in range(6)]
    kinds = [gate.judge(f, "127.0.0.1", 0.0, False).kind for f in fakes]
    assert kinds == ["admit"] * 4 + ["refuse"] * 2
    assert gate.judge(fakes[0], "127.0.0.1", 0.1, False).kind == "wait"  # probe under way
    for f in fakes[:4]:
        gate.unconfirmed(f.url, 0.5)  # nothing answered
    assert not gate.pending and len(gate.table) == 0
    # a failed claim is not probed again for one heartbeat interval (3 s)
    assert gate.judge(fakes[0], "127.0.0.1", 1.0, False).kind == "wait"
    assert gate.judge(fakes[0], "127.0.0.1", 3.6, False).kind == "admit"
    admit(gate, reg(DECODE), 3.7)  # a real one gets a place at once


def test_standalone_refuses_a_role_change_while_the_instance_is_live():
    gate = RegistryGate(RegistryTable(), SenderAllowlist(), None)
    admit(gate, reg(DECODE))
    verdict = gate.judge(reg(DECODE, type="P"), "127.0.0.1", 1.0, False)
    assert verdict.kind == "refuse" and verdict.refusal.field == "type"
    assert "silent for 9 s" in verdict.refusal.message


def test_standalone_lets_the_mode_move_but_not_flap():
    gate = RegistryGate(RegistryTable(), SenderAllowlist(), None)
    admit(gate, reg(DECODE))
    assert gate.judge(reg(DECODE, transfer_mode="WRITE"), None, 0.2, False).kind == "change"
    flap = gate.judge(reg(DECODE), None, 0.4, False)
    assert flap.kind == "refuse" and flap.refusal.reason == "flapping"
    assert gate.judge(reg(DECODE), None, 3.5, False).kind == "change"


@pytest.mark.parametrize(
    ("peer", "change", "field"),
    [
        ("10.1.2.3", {}, "sender"),
        ("127.0.0.1", {"http_address": "10.1.2.3:30005"}, "http_address"),
        ("127.0.0.1", {"http_address": "evil.example:30005"}, "http_address"),
        (
            "127.0.0.1",
            {"zmq_address": "host:10.1.2.3,handshake:7301,notify:7501"},
            "zmq_address",
        ),
    ],
)
def test_senders_and_addresses_outside_the_allowlist_are_refused(peer, change, field):
    gate = RegistryGate(RegistryTable(), SenderAllowlist(), None)
    verdict = gate.judge(reg(DECODE, **change), peer, 0.0, False)
    assert verdict.kind == "refuse" and verdict.refusal.field == field


def test_an_allowlist_of_networks_admits_them():
    allow = SenderAllowlist(["10.0.0.0/8", "::1"])
    assert allow.allows("10.1.2.3") and allow.allows("[::1]") and not allow.allows("127.0.0.1")
    assert SenderAllowlist(["any"]).allows("evil.example")
    assert SenderAllowlist().allows("localhost") and SenderAllowlist().allows("::ffff:127.0.0.1")
    with pytest.raises(ValueError, match="--registry-allow"):
        SenderAllowlist(["not-a-network"])


def test_a_url_given_by_flag_is_not_overridden_by_a_registration():
    gate = RegistryGate(RegistryTable(), SenderAllowlist(), None)
    verdict = gate.judge(reg(DECODE), "127.0.0.1", 0.0, configured=True)
    assert verdict.kind == "refuse" and verdict.refusal.reason == "configured"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"url": "http://127.0.0.1:1", "role": "x", "modes": ["read"]}, "role"),
        ({"url": "http://127.0.0.1:1", "role": "decode", "modes": []}, "modes"),
        ({"url": "http://127.0.0.1:1", "role": "decode", "modes": ["up"]}, "modes"),
        ({"url": "http://u@127.0.0.1:1", "role": "decode", "modes": ["read"]}, "url"),
        ({"url": "http://127.0.0.1:1", "role": "decode", "modes": ["read"], "tp_size": 0}, "tp"),
        ("nope", "object"),
    ],
)
def test_a_bad_expectation_is_refused_naming_the_field(data, says):
    with pytest.raises(ValueError, match=says):
        expected_instance(data)
