"""A full disk, made by SQLite itself (`PRAGMA max_page_count` at the file's size: every
write that needs a page fails with "database or disk is full"), on a real migrated file:
the API answers 507 saying so, and an event the supervisor emits meanwhile is kept in
memory and written once the disk has room (issue 39, weak 8)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from services.admission import Admission
from state.db import create_engine
from state.event_backlog import EventBacklog
from state.store import Store


@contextmanager
def disk_full(engine: sa.Engine) -> Iterator[None]:
    """Every connection opened meanwhile may not grow the file by one page."""

    def cap(dbapi_connection, _record) -> None:
        pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    engine.dispose()
    sa.event.listen(engine, "connect", cap)
    try:
        yield
    finally:
        sa.event.remove(engine, "connect", cap)
        engine.dispose()


def test_events_a_full_disk_refuses_are_written_once_it_has_room(
    tmp_path: Path, migrated: Path
) -> None:
    db = tmp_path / "pdctl.db"
    shutil.copy(migrated, db)
    engine = create_engine(db)
    store = Store(engine, Admission((43000, 43999), False, lambda port: False))
    record = EventBacklog(store.record, wall=lambda: 1234.5)
    filler = "x" * 3000  # each event needs new pages soon
    with disk_full(engine):
        for i in range(20):
            record("supervisor", "backoff", f"pd/decode-0: restart {i} {filler}", "pd")
        assert record.waiting() > 0
    record("supervisor", "ready", "pd/decode-0: ready", "pd")
    assert record.waiting() == 0
    events = list(reversed(store.events("pd", limit=100)))
    assert [e.message.split(" ", 2)[:2] for e in events[:20]] == [["pd/decode-0:", "restart"]] * 20
    late = [e for e in events if e.detail.get("written_late")]
    assert late and all(e.detail["happened_at"] == 1234.5 for e in late)
    assert events[-1].message == "pd/decode-0: ready"


def test_the_backlog_is_bounded(tmp_path: Path, migrated: Path) -> None:
    db = tmp_path / "pdctl.db"
    shutil.copy(migrated, db)
    engine = create_engine(db)
    store = Store(engine, Admission((43000, 43999), False, lambda port: False))
    record = EventBacklog(store.record, keep=5)
    with disk_full(engine):
        for i in range(50):
            record("supervisor", "backoff", f"restart {i} " + "y" * 3000, "pd")
        assert record.waiting() == 5
    record("supervisor", "ready", "ready", "pd")
    events = list(reversed(store.events("pd", limit=100)))
    assert events[-1].message == "ready"
    assert any(e.detail.get("dropped_before") for e in events)
