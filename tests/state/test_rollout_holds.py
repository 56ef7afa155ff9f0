"""While a rollout is active it holds its deployment: every other writer gets a 409 that
names the rollout, where it is, and how to watch it and end it; the rollout itself can
still make its change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.admission import Admission
from state.db import create_engine
from state.errors import ChangeInProgress
from state.store import Store
from tests.specs import moriio_1p1d, spec

WATCH = "watch it with `pdctl rollout status mori`, end it with `pdctl rollout abort mori`"


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
    return store


def rollout(revision: int, kind: str = "switch", **more: object) -> dict:
    return {
        "revision": revision,
        "kind": kind,
        "strategy": "roll",
        "state": "running",
        "actor": "operator:bob",
        **more,
    }


STEPS = [f"step {i}" for i in range(10)]


def test_a_revision_in_progress_under_a_rollout_names_it(store: Store) -> None:
    number = store.update(
        "mori", spec(moriio_1p1d(mode="read")), "operator:bob", "to read", pending=True
    ).revision
    held = store.new_rollout(
        "mori", rollout(number, steps=STEPS, step_index=1, current="drain prefill-0")
    )
    store.begin_stored("mori", number, "operator:bob", "to read", "switch", rollout_id=held)
    with pytest.raises(ChangeInProgress) as info:
        store.update("mori", spec(moriio_1p1d(model="other")), "operator:carol")
    assert str(info.value) == (
        f"deployment 'mori' has revision 2 in progress (to read): rollout {held} (switch by "
        f"roll, step 2/10: drain prefill-0) holds it: {WATCH}"
    )
    assert (info.value.rollout_id, info.value.revision, info.value.status) == (held, 2, 409)


def test_a_restart_rollout_holds_the_deployment_with_no_revision_in_progress(
    store: Store,
) -> None:
    held = store.new_rollout("mori", rollout(1, "restart", reason="new driver"))
    edit = spec(moriio_1p1d(mode="read"))
    for attempt in (
        lambda: store.update("mori", edit, "operator:carol"),
        lambda: store.update("mori", edit, "operator:carol", pending=True),
        lambda: store.delete("mori", "operator:carol"),
        lambda: store.begin_change("mori", edit, "operator:carol", None),
        lambda: store.begin_stored("mori", 1, "operator:carol", None, "restart"),
    ):
        with pytest.raises(ChangeInProgress) as info:
            attempt()
        assert str(info.value) == (
            "deployment 'mori' has revision 1 in progress (new driver): rollout "
            f"{held} (restart by roll) holds it: {WATCH}"
        )
        assert info.value.rollout_id == held
    assert [r.number for r in store.revisions("mori")] == [1]
    assert store.in_progress("mori") is None


def test_the_holding_rollout_itself_may_make_its_change(store: Store) -> None:
    held = store.new_rollout("mori", rollout(2, current="write revision 2"))
    edit = spec(moriio_1p1d(mode="read"))
    number = store.begin_change("mori", edit, "operator:bob", None, rollout_id=held)
    assert store.in_progress("mori") == number == 2
    # Its revision in progress still refuses a second change, even from the rollout.
    with pytest.raises(ChangeInProgress, match=f"rollout {held} \\(switch by roll, write"):
        store.begin_change("mori", edit, "operator:bob", None, rollout_id=held)


def test_an_ended_rollout_holds_nothing(store: Store) -> None:
    held = store.new_rollout("mori", rollout(1, "restart"))
    store.save_rollout(held, rollout(1, "restart", state="aborted"))
    assert store.update("mori", spec(moriio_1p1d(mode="read")), "x").revision == 2
    store.delete("mori", "x")
    assert store.names() == []


def test_without_a_rollout_the_409_is_as_it_was(store: Store) -> None:
    store.begin_change("mori", spec(moriio_1p1d(mode="read")), "operator:bob", "to read")
    with pytest.raises(ChangeInProgress) as info:
        store.delete("mori", "operator:carol")
    assert str(info.value) == (
        "deployment 'mori' has revision 2 in progress (to read): nothing else can change it "
        "until that change is applied, failed or rolled back"
    )
    assert info.value.rollout_id is None


@pytest.mark.parametrize(
    ("more", "said"),
    [
        ({}, "switch by roll"),
        ({"current": "drain prefill-0"}, "switch by roll, drain prefill-0"),
        ({"steps": STEPS, "step_index": 0}, "switch by roll, step 1/10"),
        ({"steps": STEPS, "step_index": 9, "current": "done"}, "switch by roll, step 10/10: done"),
        ({"step_index": 3, "current": "x"}, "switch by roll, x"),  # no steps: no count
    ],
)
def test_where_the_rollout_is_said_from_its_record(more: dict, said: str) -> None:
    error = ChangeInProgress("mori", 2, None, {"id": 5, **rollout(2, **more)})
    assert f"rollout 5 ({said}) holds it" in str(error)
