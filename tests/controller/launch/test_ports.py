"""Pure port allocation: given ports kept, the rest from the range, taken ones skipped."""

from __future__ import annotations

import pytest

from controller.launch.ports import PortsExhausted, allocate
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d, spec


def test_nixl_gets_http_and_side_channel_per_instance_from_the_range() -> None:
    ports = allocate(spec(nixl_1p1d()), port_range=(30000, 30099))
    assert (ports.proxy, ports.registry) == (30000, 30001)
    assert ports.instances["prefill-0"].model_dump() == {
        "http": 30002,
        "handshake": None,
        "notify": None,
        "side_channel": 30003,
    }
    assert ports.instances["decode-0"].side_channel == 30005


def test_moriio_bases_claim_one_port_per_tp_rank() -> None:
    s = spec(moriio_1p1d(tp=4))
    ports = allocate(s, port_range=(30000, 30099))
    p = ports.instances["prefill-0"]
    assert (p.http, p.handshake, p.notify) == (30002, 30003, 30007)
    assert ports.instances["decode-0"].http == 30011
    assert set(range(30003, 30011)) <= ports.claimed(s)
    assert len(ports.claimed(s)) == 2 + 2 * (1 + 4 + 4)


def test_given_ports_are_kept_and_never_handed_out_again() -> None:
    body = edited(colocated(count=2), ("groups", 0, "ports"), [{"http": 30001}, {}])
    ports = allocate(spec(body), port_range=(30000, 30099))
    assert ports.instances["main-0"].http == 30001
    assert 30001 not in (ports.proxy, ports.registry, ports.instances["main-1"].http)


def test_taken_ports_are_skipped_including_inside_a_rank_range() -> None:
    ports = allocate(spec(moriio_1p1d(tp=2)), taken={30000, 30004}, port_range=(30000, 30099))
    assert (ports.proxy, ports.registry) == (30001, 30002)
    prefill = ports.instances["prefill-0"]
    assert prefill.http == 30003
    assert prefill.handshake == 30005  # 30004 is taken, so the pair 30004-30005 is not free


def test_a_range_too_small_is_exhausted() -> None:
    with pytest.raises(PortsExhausted, match="ending at 30003"):
        allocate(spec(nixl_1p1d()), port_range=(30000, 30003))
