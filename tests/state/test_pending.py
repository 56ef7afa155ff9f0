"""Pending revisions: stored as desired but not rolled out, begun by a rollout (or a settled
one re-applied), settled like any change; a stopped deployment started at one settles it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from domain.errors import Conflict
from services.admission import Admission
from state.db import create_engine
from state.errors import ChangeInProgress, NotFound, Unreadable
from state.store import Store
from tests.specs import colocated, moriio_1p1d, spec


def admission() -> Admission:
    return Admission((43000, 43999), False, lambda port: False)


@pytest.fixture
def engine(tmp_path: Path, migrated: Path) -> Iterator[sa.Engine]:
    db = tmp_path / "pdctl.db"
    db.write_bytes(migrated.read_bytes())
    engine = create_engine(db)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: sa.Engine) -> Store:
    store = Store(engine, admission())
    store.create(spec(moriio_1p1d(mode="write")), "operator:alice")
    store.settle_change("mori", 1, "applied")  # as its start does once all of it is ready
    return store


def edit(store: Store, mode: str = "read", **more: object) -> int:
    body = moriio_1p1d(mode=mode, **more)
    return store.update("mori", spec(body), "operator:bob", "to read", pending=True).revision


def states(store: Store) -> list[tuple[int, str]]:
    return [(r.number, r.state) for r in store.revisions("mori")]


def test_a_pending_edit_is_desired_but_not_rolled_out(store: Store) -> None:
    number = edit(store)
    current = store.get("mori")
    assert (number, current.revision, current.state) == (2, 2, "pending")
    assert states(store) == [(2, "pending"), (1, "applied")]
    assert store.in_progress("mori") is None
    event = store.events("mori", "deployment.updated")[0]
    assert event.message == "mori updated to revision 2 (pending): to read"
    assert event.detail == {"revision": 2, "previous": 1, "state": "pending"}


def test_an_edit_not_pending_is_applied_and_says_nothing_of_it(store: Store) -> None:
    store.update("mori", spec(moriio_1p1d(mode="read")), "operator:bob")
    assert states(store) == [(2, "applied"), (1, "applied")]
    event = store.events("mori", "deployment.updated")[0]
    assert "pending" not in event.message and "state" not in event.detail


def test_a_dry_run_pending_edit_stores_nothing(store: Store) -> None:
    would = store.update("mori", spec(moriio_1p1d(mode="read")), "x", dry_run=True, pending=True)
    assert (would.revision, would.state) == (2, "pending")
    assert states(store) == [(1, "applied")]


def test_pending_then_begun_then_applied(store: Store) -> None:
    number = edit(store)
    store.begin_stored("mori", number, "controller", "to read", "switch")
    assert states(store) == [(2, "in_progress"), (1, "applied")]
    assert (store.get("mori").revision, store.in_progress("mori")) == (2, 2)
    event = store.events("mori", "revision.in_progress")[0]
    assert event.message == "mori: revision 2 in progress (switch, was pending): to read"
    assert event.detail == {"revision": 2, "previous": 1, "change": "switch", "was": "pending"}
    store.settle_change("mori", number, "applied")
    assert states(store) == [(2, "applied"), (1, "applied")]
    assert store.get("mori").state == "applied"


def test_a_new_deployment_is_pending_until_a_start_has_it_all_ready(engine: sa.Engine) -> None:
    store = Store(engine, admission())
    created = store.create(spec(moriio_1p1d(mode="read")), "operator:alice")
    assert (created.revision, created.state) == (1, "pending")
    store.update("mori", spec(moriio_1p1d(mode="write")), "operator:bob", pending=True)
    # edited again before it ever started: the first never runs
    assert states(store) == [(2, "pending"), (1, "superseded")]
    store.settle_change("mori", 2, "applied")
    assert (store.get("mori").state, states(store)[1]) == ("applied", (1, "superseded"))


def test_a_pending_revision_that_fails_gives_back_the_applied_one_below_it(
    store: Store,
) -> None:
    first = edit(store)  # 2: pending, superseded before any rollout began it
    second = edit(store, tp=4)  # 3
    store.begin_stored("mori", second, "controller", None, "update")
    store.settle_change("mori", second, "failed", "decode-0 did not start")
    # 2 never ran, so the desired revision is 1, the newest applied.
    assert store.get("mori").revision == 1
    assert states(store) == [(3, "failed"), (first, "superseded"), (1, "applied")]
    assert store.events("mori", "revision.failed")[0].detail["desired"] == 1


def test_a_stopped_deployment_started_at_a_pending_revision_settles_it(store: Store) -> None:
    number = edit(store)
    store.settle_change("mori", number, "applied")
    assert states(store) == [(2, "applied"), (1, "applied")]
    assert store.events("mori", "revision.applied")[0].message == "mori: revision 2 applied"


def test_a_pending_revision_that_did_not_start_gives_back_the_applied_one(
    store: Store,
) -> None:
    number = edit(store)
    store.settle_change("mori", number, "failed", "prefill-0 exited")
    assert (store.get("mori").revision, states(store)) == (1, [(2, "failed"), (1, "applied")])


def test_a_settled_revision_does_not_settle_again(store: Store) -> None:
    with pytest.raises(Conflict, match="revision 1 is applied, not in progress or pending"):
        store.settle_change("mori", 1, "applied")


def test_a_rollout_re_applies_an_older_revision_and_its_failure_gives_back_the_newer(
    store: Store,
) -> None:
    store.update("mori", spec(moriio_1p1d(mode="read")), "x")  # 2, applied
    store.begin_stored("mori", 1, "operator:carol", "back to write", "undo")
    assert (store.get("mori").revision, states(store)) == (
        1,
        [(2, "applied"), (1, "in_progress")],
    )
    event = store.events("mori", "revision.in_progress")[0]
    assert event.detail["previous"] == 2 and event.detail["was"] == "applied"
    store.settle_change("mori", 1, "failed")
    # What still runs is revision 2, newer than the one that failed: it is desired again.
    assert store.get("mori").revision == 2


@pytest.mark.parametrize("settled", ["failed", "rolled_back"])
def test_a_revision_that_did_not_land_can_be_begun_again(store: Store, settled: str) -> None:
    number = store.begin_change("mori", spec(moriio_1p1d(mode="read")), "x", None)
    store.settle_change("mori", number, settled)
    store.begin_stored("mori", number, "controller", "again", "switch")
    assert (store.get("mori").revision, store.in_progress("mori")) == (2, 2)


def test_begin_stored_of_an_unknown_revision_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="'mori' has no revision 7"):
        store.begin_stored("mori", 7, "controller", None, "switch")
    with pytest.raises(NotFound, match="no deployment named 'gone'"):
        store.begin_stored("gone", 1, "controller", None, "switch")


def test_begin_stored_while_a_revision_is_in_progress_is_refused(store: Store) -> None:
    pending = edit(store)
    store.begin_stored("mori", pending, "controller", None, "switch")
    for number in (1, pending):  # another revision, or this one begun twice
        with pytest.raises(ChangeInProgress, match="'mori' has revision 2 in progress"):
            store.begin_stored("mori", number, "controller", None, "switch")
    assert states(store) == [(2, "in_progress"), (1, "applied")]


def test_begin_stored_refuses_a_revision_whose_ports_another_now_claims(
    engine: sa.Engine,
) -> None:
    store = Store(engine, admission())
    store.create(spec(colocated("a", count=2)), "x")
    store.settle_change("a", 1, "applied")
    store.update("a", spec(colocated("a", count=1)), "x")  # frees main-1's port
    taken = store.get("a").ports.proxy + 3  # what main-1 had in revision 1
    b = store.create(spec(colocated("b")), "x")
    assert taken in b.ports.claimed(b.spec)
    with pytest.raises(Conflict, match=f"revision 1 was given port {taken}, which 'b' now"):
        store.begin_stored("a", 1, "controller", None, "undo")
    assert [(r.number, r.state) for r in store.revisions("a")] == [(2, "applied"), (1, "applied")]


def test_begin_stored_refuses_a_revision_todays_rules_cannot_read(
    store: Store, engine: sa.Engine
) -> None:
    store.update("mori", spec(moriio_1p1d(mode="read")), "x")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE revisions SET spec = json_set(spec, '$.groups[0].tp', 'two') WHERE number = 1"
        )
    with pytest.raises(Unreadable, match="revision 1 as stored cannot be read"):
        store.begin_stored("mori", 1, "controller", None, "undo")
    assert store.get("mori").revision == 2
