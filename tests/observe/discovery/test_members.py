"""A discovered group's membership: stable names while instances come and go, addresses
outside the allowed hosts skipped (an event naming them, once), the events of each look."""

from __future__ import annotations

from domain.attached.discovery import Found
from observe.discovery.members import Members, admitted, moved, renumbered

A, B, C = "http://127.0.0.1:8100", "http://127.0.0.1:8101", "http://127.0.0.1:8102"


def test_an_instance_keeps_its_index_while_it_stays():
    assert renumbered({}, [A, B]) == {A: 0, B: 1}
    assert renumbered({A: 0, B: 1}, [B, C]) == {B: 1, C: 0}  # C takes A's free index
    assert renumbered({B: 1, C: 0}, [C, B, A]) == {C: 0, B: 1, A: 2}


def test_a_host_the_operator_has_not_allowed_is_skipped_with_why():
    outside = "http://10.1.2.3:8000"
    kept, skipped = admitted(Found([A, outside], {"x": "bad"}), [])
    assert kept == [A]
    assert set(skipped) == {outside, "x"} and "PDCTL_ATTACH_HOSTS" in skipped[outside]
    assert admitted(Found([outside], {}), ["10.0.0.0/8"]) == ([outside], {})


def test_each_look_says_who_appeared_who_went_and_who_is_skipped():
    outside = "http://10.1.2.3:8000"
    first, said = moved("ext", Members("prefill"), Found([A, B], {}), [], "Prometheus p")
    assert first.names() == {"prefill-0": A, "prefill-1": B}
    assert [c.kind for c in said] == ["attached.instance_appeared"] * 2
    assert said[0].message == f"ext/prefill-0 ({A}) appeared in Prometheus p"

    second, said = moved("ext", first, Found([B, outside], {}), [], "Prometheus p")
    assert second.names() == {"prefill-1": B}
    assert [(c.kind, c.detail.get("url")) for c in said] == [
        ("attached.instance_gone", A),
        ("attached.discovery_skipped", outside),
    ]
    assert outside in said[1].message and "not watched" in said[1].message

    third, said = moved("ext", second, Found([B, outside], {}), [], "Prometheus p")
    assert said == []  # nothing changed: a skipped address is told once
    assert third == second


def test_a_gone_instance_leaves_the_others_their_names():
    before = Members("decode", {A: 0, B: 1})
    after, said = moved("ext", before, Found([B], {}), [], "vllm-router r")
    assert after.names() == {"decode-1": B}
    assert [c.detail["instance"] for c in said] == ["decode-0"]
