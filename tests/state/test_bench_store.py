"""Bench runs in SQLite: created running, advanced, finished once; runs left running by an
earlier process are marked failed; snapshots and curves say what a run measured, and a run
stopped part-way is a partial curve."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.bench_runs import compare as bench_compare
from state.bench_store import BenchStore, snapshot
from state.db import create_engine
from tests.specs import colocated, moriio_1p1d, nixl_1p1d, spec
from web.errors import NotFound


@pytest.fixture
def store(tmp_path: Path, migrated: Path) -> BenchStore:
    db = tmp_path / "pdctl.db"
    db.write_bytes(migrated.read_bytes())
    return BenchStore(create_engine(db))


def _run(store: BenchStore, deployment: str = "mori", revision: int = 1):
    return store.create(
        deployment,
        revision,
        snapshot(spec(moriio_1p1d(deployment))),
        {"rates": [2.0, 4.0], "num_prompts": 10},
        20,
        "alice",
    )


def sweep(*points: tuple[float, float]) -> dict:
    return {
        "goodput_share": 0.9,
        "max_goodput_rate": 2.0,
        "runs": [
            {
                "request_rate": r,
                "slo_attainment": a,
                "p99_ttft_ms": 10.0 * r,
                "p99_itl_ms": 5.0,
                "request_goodput": r * a,
                "completed": 10,
                "failed": 0,
            }
            for r, a in points
        ],
    }


def test_a_run_is_created_running_advanced_and_finished(store: BenchStore) -> None:
    run = _run(store)
    assert (run.status, run.done, run.total, run.finished_at) == ("running", 0, 20, None)
    store.advance(run.id, 7)
    assert store.get(run.id).done == 7
    done = store.finish(run.id, "done", done=20, result=sweep((2.0, 1.0), (4.0, 0.5)))
    assert done.status == "done" and done.done == 20 and done.finished_at is not None
    assert done.result["max_goodput_rate"] == 2.0
    store.advance(run.id, 3)  # a late progress line does not move a finished run
    assert store.get(run.id).done == 20


def test_finish_takes_only_an_end_state(store: BenchStore) -> None:
    with pytest.raises(ValueError, match="running"):
        store.finish(_run(store).id, "running")


def test_runs_left_running_by_an_earlier_process_are_failed(store: BenchStore) -> None:
    left, ended = _run(store), _run(store)
    store.finish(ended.id, "stopped", error="stopped by alice")
    assert store.abandon_running("the control plane restarted") == 1
    assert store.get(left.id).status == "failed"
    assert store.get(left.id).error == "the control plane restarted"
    assert store.get(ended.id).status == "stopped"


def test_lists_newest_first_and_many_keeps_the_order_asked(store: BenchStore) -> None:
    a, b, c = _run(store), _run(store, "other"), _run(store)
    assert [r.id for r in store.of("mori")] == [c.id, a.id]
    assert [r.id for r in store.many([c.id, b.id, a.id])] == [c.id, b.id, a.id]
    with pytest.raises(NotFound, match="no bench run 999"):
        store.many([a.id, 999])
    with pytest.raises(NotFound):
        store.get(999)


@pytest.mark.parametrize(
    ("body", "shape", "counts"),
    [
        (moriio_1p1d("m", mode="read"), "read 1P1D", (1, 1, 0)),
        (nixl_1p1d(), "NixlConnector 1P1D", (1, 1, 0)),
        (colocated(count=2), "colocated x2", (0, 0, 2)),
    ],
)
def test_snapshot_names_the_shape(body: dict, shape: str, counts: tuple) -> None:
    shot = snapshot(spec(body))
    assert shot["shape"] == shape
    assert (shot["prefill"], shot["decode"], shot["colocated"]) == counts


def test_curves_from_a_sweep_and_from_a_single_rate(store: BenchStore) -> None:
    run = store.finish(_run(store, revision=3).id, "done", result=sweep((4.0, 0.5), (2.0, 1.0)))
    curve = bench_compare.curve(run)
    assert curve["label"] == "mori r3 · write 1P1D"
    assert [(p["rate"], p["slo_attainment"]) for p in curve["points"]] == [(2.0, 1.0), (4.0, 0.5)]
    flat = {**sweep((8.0, 0.25))["runs"][0], "max_goodput_rate": None}
    assert [p["rate"] for p in bench_compare.points(flat)] == [8.0]
    assert bench_compare.points({"runs": [{"request_rate": "inf"}]}) == []
    assert bench_compare.points(None) == []


def test_a_run_stopped_part_way_is_a_partial_curve_of_the_rates_it_measured(
    store: BenchStore,
) -> None:
    kept = {**sweep((2.0, 1.0)), "partial": {"rates_done": 1, "rates": 2}}
    run = store.finish(
        _run(store).id,
        "stopped",
        done=13,
        result=kept,
        error="stopped by alice after 1 of 2 rates; kept 1",
    )
    assert bench_compare.partial(run)
    curve = bench_compare.curve(run)
    assert curve["partial"] and curve["rates_offered"] == 2
    assert curve["label"] == "mori r1 · write 1P1D (partial: 1 of 2 rates)"
    assert [p["rate"] for p in curve["points"]] == [2.0]
    nothing = store.finish(
        _run(store).id, "stopped", error="stopped by alice after 0 of 2 rates; kept none"
    )
    whole = store.finish(_run(store).id, "done", result=sweep((2.0, 1.0), (4.0, 0.5)))
    assert not bench_compare.partial(nothing) and not bench_compare.partial(whole)
    assert bench_compare.curve(whole)["label"] == "mori r1 · write 1P1D"


def test_a_run_that_spans_a_switch_says_its_figures_mix_two_revisions(
    store: BenchStore, tmp_path: Path
) -> None:
    from services.bench_runs.runs import BenchRuns, _Active

    revision = {"mori": 1}
    runs = BenchRuns(store, lambda *a, **k: None, lambda name: revision[name])
    for now, expected in ((1, None), (2, "revision 1 -> 2")):
        run = _run(store)
        revision["mori"] = now
        active = _Active(
            run.id,
            "mori",
            "alice",
            None,
            tmp_path / "gone",
            0.0,
            20,
            2,
        )
        runs._active["mori"] = active
        runs._end(active, "done", result=sweep((2.0, 1.0)))
        error = store.get(run.id).error
        assert (error is None) if expected is None else (expected in error)


def test_a_run_is_finished_in_the_store_before_it_stops_being_current(
    store: BenchStore, tmp_path: Path
) -> None:
    """The panel reads the current run and the stored rows from another thread: whenever it
    sees no current run, the row must already say how the run ended."""
    from services.bench_runs.runs import BenchRuns, _Active

    runs = BenchRuns(store, lambda *a, **k: None)
    seen: list[tuple[str, int | None]] = []
    finish = store.finish

    def finishing(run_id: int, status: str, **kw):
        seen.append((status, runs.current("mori")))
        return finish(run_id, status, **kw)

    store.finish = finishing
    for status in ("done", "failed", "stopped"):
        run = _run(store)
        active = _Active(run.id, "mori", "alice", None, tmp_path / "gone", 0.0, 20, 2)
        runs._active["mori"] = active
        runs._end(active, status, result=sweep((2.0, 1.0)))
        assert seen[-1] == (status, run.id)  # still current while the row was finished
        assert runs.current("mori") is None and store.get(run.id).status == status
