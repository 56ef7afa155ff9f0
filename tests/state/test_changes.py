"""Revision states: a change begun in progress, the 409 every other writer gets meanwhile,
its settling (applied, failed, rolled back), and all of it surviving a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from domain.errors import Conflict
from services.admission import Admission
from state import migrate
from state.changes import RevisionState
from state.db import create_engine
from state.errors import ChangeInProgress
from state.models import Event
from state.store import Store
from tests.specs import moriio_1p1d, spec


def admission() -> Admission:
    return Admission((43000, 43999), False, lambda port: False)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: sa.Engine) -> Store:
    store = Store(engine, admission())
    store.create(spec(moriio_1p1d(mode="write")), "operator:alice")
    store.settle_change("mori", 1, "applied")  # as its start does once all of it is ready
    return store


def begin(store: Store) -> int:
    return store.begin_change("mori", spec(moriio_1p1d(mode="read")), "operator:bob", "to read")


def test_a_change_is_written_in_progress_as_the_desired_revision(store: Store) -> None:
    number = begin(store)
    current = store.get("mori")
    assert (number, current.revision, current.state) == (2, 2, "in_progress")
    assert current.spec.groups[0].mode.value == "read"
    assert [r.state for r in store.revisions("mori")] == ["in_progress", "applied"]
    event = store.events("mori", "revision.in_progress")[0]
    assert event.detail == {"revision": 2, "previous": 1, "change": "switch"}
    assert store.in_progress("mori") == 2


def test_every_other_writer_gets_a_409_naming_the_revision_in_progress(store: Store) -> None:
    begin(store)
    edit = spec(moriio_1p1d(mode="write", model="other"))
    for attempt in (
        lambda: store.update("mori", edit, "operator:carol"),
        lambda: store.update("mori", edit, "operator:carol", based_on=2),  # If-Match: current
        lambda: store.update("mori", edit, "operator:carol", based_on=1),
        lambda: store.delete("mori", "operator:carol"),
        lambda: begin(store),
    ):
        with pytest.raises(ChangeInProgress, match="'mori' has revision 2 in progress") as info:
            attempt()
        assert info.value.status == 409 and isinstance(info.value, Conflict)
    assert [r.number for r in store.revisions("mori")] == [2, 1]


def test_an_applied_change_stays_desired_and_frees_the_deployment(store: Store) -> None:
    number = begin(store)
    store.settle_change("mori", number, "applied")
    current = store.get("mori")
    assert (current.revision, current.state) == (2, "applied")
    assert store.in_progress("mori") is None
    assert store.update("mori", spec(moriio_1p1d(mode="write")), "x").revision == 3


@pytest.mark.parametrize("outcome", ["failed", "rolled_back"])
def test_a_change_that_did_not_land_gives_back_the_previous_applied(
    store: Store, outcome: str
) -> None:
    number = begin(store)
    store.settle_change("mori", number, outcome, "prefill-0 did not come back")
    current = store.get("mori")
    assert (current.revision, current.state) == (1, "applied")
    assert [r.state for r in store.revisions("mori")] == [outcome, "applied"]
    event = store.events("mori", f"revision.{outcome}")[0]
    assert "revision 1 is desired again: prefill-0 did not come back" in event.message
    assert event.detail["desired"] == 1
    # The next change is numbered after the one that did not land, from revision 1.
    after = store.update("mori", spec(moriio_1p1d(mode="read")), "x", based_on=1)
    assert after.revision == 3


def test_a_revision_in_progress_survives_a_restart_and_can_be_settled(
    store: Store, engine: sa.Engine
) -> None:
    number = begin(store)
    engine.dispose()
    again = Store(create_engine(Path(engine.url.database)), admission())
    try:
        assert (again.get("mori").state, again.in_progress("mori")) == ("in_progress", number)
        again.settle_change("mori", number, RevisionState.ROLLED_BACK)
        assert again.get("mori").revision == 1
    finally:
        again.engine.dispose()


def test_only_a_revision_in_progress_settles_and_only_into_an_end_state(store: Store) -> None:
    with pytest.raises(Conflict, match="revision 1 is applied, not in progress"):
        store.settle_change("mori", 1, "failed")
    number = begin(store)
    with pytest.raises(ValueError):
        store.settle_change("mori", number, "in_progress")
    with pytest.raises(ValueError):
        store.settle_change("mori", number, "done")


def test_every_write_hands_its_committed_event_to_publish(engine: sa.Engine) -> None:
    published: list[Event] = []
    store = Store(engine, admission(), publish=published.append)
    store.create(spec(moriio_1p1d()), "operator:alice")
    number = begin(store)
    store.settle_change("mori", number, "applied")
    store.update("mori", spec(moriio_1p1d(mode="write")), "operator:alice")
    store.record("controller", "instance.started", "prefill-0 started", "mori")
    store.delete("mori", "operator:alice")
    assert [e.kind for e in published] == [
        "deployment.created",
        "revision.in_progress",
        "revision.applied",
        "deployment.updated",
        "instance.started",
        "deployment.deleted",
    ]
    assert [e.id for e in published] == sorted(e.id for e in store.events(limit=10))
