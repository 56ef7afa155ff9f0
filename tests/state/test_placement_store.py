"""Placements in SQLite: a start keeps every process (and drops those the spec no longer
has), a move one process; read back proxy first; gone with the deployment."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from state.db import create_engine
from state.placement_store import PlacedProcess, PlacementStore

EARLY = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path, migrated: Path):
    db = tmp_path / "pdctl.db"
    db.write_bytes(migrated.read_bytes())
    engine = create_engine(db)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO deployments (name, revision, created_at, updated_at) "
            "VALUES ('pd', 1, '2026-01-01', '2026-01-01')"
        )
    yield engine
    engine.dispose()


def where(store: PlacementStore) -> list[tuple]:
    return [(r.process, r.node_address, r.gpus, r.placed_at) for r in store.of("pd")]


START = [
    PlacedProcess("decode-0", "b" * 56, "127.0.0.3", 1.0),
    PlacedProcess("proxy", "a" * 56, "127.0.0.2"),
    PlacedProcess("prefill-0", "a" * 56, "127.0.0.2", 1.0),
]


def test_a_start_keeps_every_process_and_a_move_only_the_one_that_moved(engine) -> None:
    store = PlacementStore(engine)
    store.keep("pd", START, whole=True, at=EARLY)
    assert where(store) == [
        ("proxy", "127.0.0.2", 0.0, EARLY),
        ("decode-0", "127.0.0.3", 1.0, EARLY),
        ("prefill-0", "127.0.0.2", 1.0, EARLY),
    ]
    store.keep("pd", [PlacedProcess("decode-0", "c" * 56, "127.0.0.4", 1.0)], at=LATER)
    assert where(store)[1] == ("decode-0", "127.0.0.4", 1.0, LATER)
    assert store.of("pd")[1].node_id == "c" * 56
    assert [r[3] for r in where(store)] == [EARLY, LATER, EARLY]  # the others stay as placed


def test_a_start_drops_processes_the_spec_no_longer_has(engine) -> None:
    store = PlacementStore(engine)
    store.keep("pd", [*START, PlacedProcess("decode-1", "b" * 56, "127.0.0.3", 1.0)], whole=True)
    store.keep("pd", START, whole=True)
    assert [r.process for r in store.of("pd")] == ["proxy", "decode-0", "prefill-0"]


def test_placements_go_with_their_deployment_and_none_is_kept_for_an_unknown_one(engine) -> None:
    store = PlacementStore(engine)
    store.keep("gone", START, whole=True)  # deleted meanwhile: nothing, and no error
    assert store.of("gone") == []
    store.keep("pd", START, whole=True)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM deployments WHERE name = 'pd'"))
    assert store.of("pd") == []
