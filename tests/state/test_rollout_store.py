"""Rollouts in SQLite: stored whole with their id, saved until they end, listed newest first,
the active one found (and one at most per deployment), every unfinished one found after a
restart; start samples kept 200 per group and read back per group; all gone with the
deployment."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.admission import Admission
from state.db import create_engine
from state.errors import ChangeInProgress, NotFound
from state.rollout_store import KEPT_SAMPLES
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
    return Store(engine, admission())


def body(state: str = "running", revision: int = 2, **more: object) -> dict:
    return {
        "revision": revision,
        "kind": "switch",
        "strategy": "roll",
        "state": state,
        "actor": "operator:alice",
        **more,
    }


def ended_at(engine: sa.Engine, rollout_id: int) -> str | None:
    with engine.connect() as conn:
        return conn.exec_driver_sql(
            f"SELECT ended_at FROM rollouts WHERE id = {rollout_id}"
        ).scalar()


def test_a_new_rollout_is_stored_whole_with_its_id(store: Store, engine: sa.Engine) -> None:
    given = body(steps=["drain prefill-0", "restart prefill-0"], step_index=0)
    rollout_id = store.new_rollout("mori", given)
    assert store.rollout("mori", rollout_id) == {**given, "id": rollout_id}
    assert "id" not in given  # the caller's dict is left as it was
    with engine.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT deployment, revision, kind, strategy, state, actor, ended_at FROM rollouts"
        ).one()
    assert tuple(row) == ("mori", 2, "switch", "roll", "running", "operator:alice", None)


@pytest.mark.parametrize("missing", ["revision", "kind", "strategy", "state", "actor"])
def test_a_rollout_without_a_required_field_is_refused_naming_it(
    store: Store, missing: str
) -> None:
    given = body()
    del given[missing]
    with pytest.raises(ValueError, match=f"needs {missing}"):
        store.new_rollout("mori", given)
    rollout_id = store.new_rollout("mori", body())
    with pytest.raises(ValueError, match=f"needs {missing}"):
        store.save_rollout(rollout_id, given)
    assert store.rollouts("mori")[0]["state"] == "running"


def test_a_revision_that_is_not_a_number_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="revision is a number, not '2'"):
        store.new_rollout("mori", body(revision="2"))
    assert store.rollouts("mori") == []


def test_save_replaces_the_body_and_ends_it_once(store: Store, engine: sa.Engine) -> None:
    rollout_id = store.new_rollout("mori", body())
    store.save_rollout(rollout_id, body(current="drain prefill-0", step_index=0))
    assert store.rollout("mori", rollout_id) == {
        **body(current="drain prefill-0", step_index=0),
        "id": rollout_id,
    }
    assert ended_at(engine, rollout_id) is None
    store.save_rollout(rollout_id, body("aborting"))
    assert ended_at(engine, rollout_id) is None  # aborting is still under way
    store.save_rollout(rollout_id, body("aborted"))
    first = ended_at(engine, rollout_id)
    assert first is not None
    store.save_rollout(rollout_id, body("aborted", note="said again"))
    assert ended_at(engine, rollout_id) == first  # set once
    assert store.rollout("mori", rollout_id)["note"] == "said again"
    store.save_rollout(rollout_id, body("rolling_back"))  # an undo: under way again
    assert ended_at(engine, rollout_id) is None
    assert store.active_rollout("mori") == {**body("rolling_back"), "id": rollout_id}


def test_save_of_an_unknown_rollout_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="no rollout 41"):
        store.save_rollout(41, body())


def test_a_rollout_of_another_deployment_is_not_found_by_id(store: Store) -> None:
    rollout_id = store.new_rollout("mori", body())
    assert store.rollout("other", rollout_id) is None
    assert store.rollout("mori", rollout_id + 1) is None


def test_rollouts_are_listed_newest_first_per_deployment(store: Store) -> None:
    ids = [store.new_rollout("mori", body("done", revision=n)) for n in (2, 3, 4)]
    store.new_rollout("other", body("done"))
    assert [r["id"] for r in store.rollouts("mori")] == ids[::-1]
    assert [r["revision"] for r in store.rollouts("mori", limit=2)] == [4, 3]
    assert store.rollouts("nobody") == []


def test_the_active_rollout_is_the_running_one(store: Store) -> None:
    assert store.active_rollout("mori") is None
    store.new_rollout("mori", body("done"))
    assert store.active_rollout("mori") is None
    rollout_id = store.new_rollout("mori", body())
    assert store.active_rollout("mori") == {**body(), "id": rollout_id}
    store.save_rollout(rollout_id, body("failed"))
    assert store.active_rollout("mori") is None


def test_one_active_rollout_per_deployment(store: Store) -> None:
    held = store.new_rollout("mori", body(reason="to read", current="drain prefill-0"))
    with pytest.raises(ChangeInProgress, match=f"rollout {held} \\(switch by roll") as info:
        store.new_rollout("mori", body())
    assert info.value.rollout_id == held
    ended = store.new_rollout("mori", body("done"))  # an ended one is only history
    with pytest.raises(ChangeInProgress):
        store.save_rollout(ended, body("rolling_back"))
    other = store.new_rollout("other", body())  # another deployment's is its own
    assert [r["id"] for r in store.unfinished()] == [held, other]


def test_unfinished_is_every_active_rollout_oldest_first(store: Store, engine: sa.Engine) -> None:
    a = store.new_rollout("a", body())
    b = store.new_rollout("b", body())
    c = store.new_rollout("c", body())
    store.save_rollout(b, body("done"))
    store.save_rollout(c, body("aborting"))
    store.new_rollout("d", body("failed"))
    engine.dispose()  # a control plane that restarted finds them
    again = Store(create_engine(Path(str(engine.url.database))), admission())
    try:
        assert [(r["id"], r["state"]) for r in again.unfinished()] == [
            (a, "running"),
            (c, "aborting"),
        ]
    finally:
        again.engine.dispose()


def test_start_samples_come_back_per_group_latest_last(store: Store) -> None:
    store.add_start_samples("mori", "prefill", [30.0, 31.5])
    store.add_start_samples("mori", "decode", [12.0])
    store.add_start_samples("mori", "prefill", [29.0])
    store.add_start_samples("other", "prefill", [99.0])
    store.add_start_samples("mori", "decode", [])  # nothing to keep
    assert store.start_samples("mori") == {"prefill": [30.0, 31.5, 29.0], "decode": [12.0]}
    assert store.start_samples("mori", per_group=2) == {
        "prefill": [31.5, 29.0],
        "decode": [12.0],
    }
    assert store.start_samples("nobody") == {}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_a_start_sample_that_is_no_duration_is_refused(store: Store, bad: float) -> None:
    with pytest.raises(ValueError, match="finite number of seconds"):
        store.add_start_samples("mori", "prefill", [3.0, bad])
    assert store.start_samples("mori") == {}  # none of the batch kept


def test_per_group_below_one_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="per_group is at least 1, not 0"):
        store.start_samples("mori", per_group=0)


def test_only_the_latest_200_start_samples_of_a_group_are_kept(
    store: Store, engine: sa.Engine
) -> None:
    store.add_start_samples("mori", "prefill", [float(i) for i in range(150)])
    store.add_start_samples("mori", "decode", [1.0])
    store.add_start_samples("mori", "prefill", [float(i) for i in range(150, 260)])
    with engine.connect() as conn:
        kept = conn.exec_driver_sql(
            "SELECT seconds FROM start_samples WHERE grp = 'prefill' ORDER BY id"
        ).all()
    assert [s for (s,) in kept] == [float(i) for i in range(260 - KEPT_SAMPLES, 260)]
    assert store.start_samples("mori", per_group=500)["prefill"][0] == 60.0
    assert store.start_samples("mori")["decode"] == [1.0]  # another group keeps its own


def test_delete_takes_the_deployments_rollouts_and_samples_with_it(
    store: Store, engine: sa.Engine
) -> None:
    store.create(spec(moriio_1p1d()), "operator:alice")
    store.create(spec(colocated()), "operator:alice")
    kept = store.new_rollout("solo", body("done"))
    store.add_start_samples("solo", "main", [5.0])
    done = store.new_rollout("mori", body("done"))  # the newest id
    store.add_start_samples("mori", "prefill", [30.0])
    store.delete("mori", "operator:alice")
    assert store.rollouts("mori") == [] and store.start_samples("mori") == {}
    assert store.rollout("solo", kept) is not None
    assert store.start_samples("solo") == {"main": [5.0]}
    # A deployment made again under that name starts with no history, and no id comes back.
    store.create(spec(moriio_1p1d()), "operator:alice")
    assert store.rollouts("mori") == []
    assert store.new_rollout("mori", body("done")) == done + 1


def test_rollout_writes_publish_no_event(engine: sa.Engine) -> None:
    published: list[object] = []
    store = Store(engine, admission(), publish=published.append)
    rollout_id = store.new_rollout("mori", body())
    store.save_rollout(rollout_id, body("done"))
    store.add_start_samples("mori", "prefill", [3.0])
    assert published == [] and store.events() == []
