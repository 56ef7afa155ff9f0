"""The repository directly: serialized writes, sticky ports across revisions, events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.launch.ports import AllocatedPorts, InstancePorts
from services.admission import Admission
from state import migrate
from state.db import create_engine
from state.store import Store
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d, spec
from web.errors import Conflict


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    yield Store(engine, Admission((43000, 43999), False, lambda port: False))
    engine.dispose()


def claimed(store: Store, name: str) -> set[int]:
    current = store.get(name)
    return current.ports.claimed(current.spec)


def test_concurrent_creates_never_share_a_port(store: Store) -> None:
    errors: list[Exception] = []

    def create(i: int) -> None:
        try:
            store.create(spec(nixl_1p1d(f"pd{i}")), "test")
        except Exception as exc:  # collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    ports = [claimed(store, f"pd{i}") for i in range(8)]
    assert sum(len(p) for p in ports) == len(set().union(*ports)) == 8 * 6


def test_an_update_keeps_ports_unless_the_operator_takes_one(store: Store) -> None:
    first = store.create(spec(colocated(count=2)), "test").ports
    moved = first.instances["main-1"].http
    body = edited(colocated(count=2), ("groups", 0, "ports"), [{"http": moved}, {}])
    second = store.update("solo", spec(body), "test").ports
    assert second.instances["main-0"].http == moved
    assert second.instances["main-1"].http not in (moved, first.proxy, first.registry)
    assert (second.proxy, second.registry) == (first.proxy, first.registry)


def test_a_tp_change_reallocates_that_groups_rank_ranges(store: Store) -> None:
    first = store.create(spec(moriio_1p1d(tp=2)), "test").ports
    second = store.update("mori", spec(moriio_1p1d(tp=4)), "test")
    assert isinstance(second.ports, AllocatedPorts)
    prefill = second.ports.instances["prefill-0"]
    assert prefill.notify == prefill.handshake + 4 != first.instances["prefill-0"].notify
    assert len(second.ports.claimed(second.spec)) == 2 + 2 * 9  # no rank range overlaps


def test_allocation_gives_up_when_the_host_is_full(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    try:
        full = Store(engine, Admission((43000, 43999), False, lambda port: True))
        with pytest.raises(Conflict, match="cannot allocate ports for 'pd'"):
            full.create(spec(nixl_1p1d()), "test")
    finally:
        engine.dispose()


def test_recorded_events_are_counted_by_kind(store: Store) -> None:
    store.create(spec(nixl_1p1d()), "operator:alice")
    event = store.record("controller", "instance.started", "prefill-0 started", "pd", {"pid": 42})
    assert event.id is not None and event.ts.tzinfo is not None
    assert store.events("pd", "instance.started")[0].detail == {"pid": 42}
    assert store.counts() == (1, 1, {"deployment.created": 1, "instance.started": 1})


def test_allocation_skips_busy_host_ports(tmp_path: Path) -> None:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    try:
        busy = {43000, 43002, 43003}
        store = Store(engine, Admission((43000, 43999), False, busy.__contains__))
        ports = store.create(spec(nixl_1p1d()), "test").ports
        assert (ports.proxy, ports.registry, ports.instances["prefill-0"].http) == (
            43001,
            43004,
            43005,
        )
    finally:
        engine.dispose()


def instance_ports(ports: InstancePorts, tp: int) -> set[int]:
    out = {p for p in (ports.http, ports.side_channel) if p is not None}
    for base in (ports.handshake, ports.notify):
        if base is not None:
            out.update(range(base, base + tp))
    return out


@pytest.mark.parametrize("change", ["renamed groups", "one more per group", "tp changed"])
def test_a_new_instance_never_gets_a_port_the_current_revision_holds(
    store: Store, change: str
) -> None:
    """Even one free on the host at that moment (its process dead, restarting): the current
    revision's instances run on until a rollout stops them, and a rollback starts them again
    on those very ports."""
    body = moriio_1p1d(tp=2)
    first = store.create(spec(body), "test")
    held = first.ports.claimed(first.spec)
    groups = body["groups"]
    if change == "renamed groups":
        new = edited(body, ("groups",), [{**g, "name": f"{g['name']}-a"} for g in groups])
    elif change == "one more per group":
        new = edited(body, ("groups",), [{**g, "count": 2} for g in groups])
    else:
        new = edited(body, ("groups",), [{**g, "tp": 4} for g in groups])
    second = store.update("mori", spec(new), "test")
    fresh: set[int] = set()
    for group in second.spec.groups:
        for i in range(group.count):
            name = f"{group.name}-{i}"
            ports = second.ports.instances[name]
            if first.ports.instances.get(name) != ports:  # a new instance, or one moved
                fresh |= instance_ports(ports, group.tp)
    assert fresh and not fresh & held, (sorted(fresh & held), change)
