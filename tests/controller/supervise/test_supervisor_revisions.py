"""The supervisor mid-rollout, on fake processes, probes and clock: `start(..., only=...)`
converges some processes and leaves the others as they run, each process keeps the revision
it runs, processes a revision drops are stopped then forgotten, and the run dir keeps each
process's revision so a new supervisor adopts a half-rolled deployment as it runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.launch.ports import allocate
from controller.spec.deployment import DeploymentSpec
from controller.supervise import run_state
from tests.controller.factories import kept_ports, tiny_pair
from tests.controller.fakes import FakeBackend
from tests.controller.supervise.test_supervisor import Harness

pytestmark = pytest.mark.anyio
NAME = "tiny-pd"


def pairs(count: int = 2, decode_args: list[str] | None = None) -> DeploymentSpec:
    """`count` NIXL stand-in instances per role; `decode_args`: the decodes' extra args."""
    return tiny_pair(
        NAME,
        groups=[
            {"name": "prefill", "role": "prefill", "count": count},
            {"name": "decode", "role": "decode", "count": count, "extra_args": decode_args or []},
        ],
    )


SEEDED = ["--seed", "7"]


def rows(h: Harness) -> dict[str, dict[str, Any]]:
    return {u["name"]: u for u in h.sup.status(NAME)}


def spawns(h: Harness, since: int = 0) -> list[str]:
    return [s[0] for s in h.backend.spawned[since:]]


async def running(h: Harness, spec: DeploymentSpec, revision: int = 1):
    ports = allocate(spec)
    await h.sup.start(NAME, spec, ports, revision=revision)
    await h.polls(3)
    assert {u["state"] for u in rows(h).values()} == {"RUNNING"}
    return ports


async def test_only_the_named_processes_converge_the_others_keep_their_launch(tmp_path):
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    before = len(h.backend.spawned)
    await h.sup.start(NAME, pairs(decode_args=SEEDED), ports, revision=2, only={"decode-0"})
    await h.polls(4)
    assert spawns(h, before) == ["decode-0"]
    now = rows(h)
    assert {n: (u["state"], u["revision"]) for n, u in now.items()} == {
        "proxy": ("RUNNING", 2),  # left alone, but runs what revision 2 would
        "prefill-0": ("RUNNING", 2),
        "prefill-1": ("RUNNING", 2),
        "decode-0": ("RUNNING", 2),
        "decode-1": ("RUNNING", 1),  # changed in revision 2, not converged yet
    }
    assert "--seed" in now["decode-0"]["command"] and "--seed" not in now["decode-1"]["command"]
    launches = {n: row[0] for n, row in h.sup.running(NAME).items()}
    assert "--seed" not in launches["decode-1"].argv
    assert {n: row[3] for n, row in h.sup.running(NAME).items()}["decode-1"] == 1
    dep = h.sup.deployments[NAME]
    assert dep.revision == 2 and set(dep.older) == {1}  # what decode-1 still runs


async def test_converging_the_rest_later_leaves_no_older_revision(tmp_path):
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    await h.sup.start(NAME, pairs(decode_args=SEEDED), ports, revision=2, only={"decode-0"})
    await h.polls(4)
    await h.sup.start(NAME, pairs(decode_args=SEEDED), ports, revision=2, only={"decode-1"})
    await h.polls(4)
    assert {u["revision"] for u in rows(h).values()} == {2}
    assert h.sup.deployments[NAME].older == {}
    saved = json.loads((h.sup.deployments[NAME].folder / run_state.DEPLOYMENT_FILE).read_text())
    assert saved["older"] == {} and set(saved["units"].values()) == {2}


async def test_a_restart_of_an_unchanged_process_asked_by_name_keeps_the_others(tmp_path):
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    before = len(h.backend.spawned)
    await h.sup.start(NAME, pairs(), ports, revision=2, only={"prefill-1"})
    await h.polls(3)
    assert spawns(h, before) == []  # converged to the same launch: nothing to restart
    assert rows(h)["prefill-1"]["revision"] == 2


async def test_processes_a_revision_drops_are_stopped_then_forgotten_never_restarted(tmp_path):
    h = Harness(tmp_path, backend=FakeBackend(obey_term=False))  # SIGTERM ignored: KILL
    ports = await running(h, pairs())
    before = len(h.backend.spawned)
    one = pairs(count=1)
    await h.sup.start(NAME, one, kept_ports(pairs(), ports, one), revision=2)
    dropping = {n: u for n, u in rows(h).items() if u["dropping"]}
    assert set(dropping) == {"prefill-1", "decode-1"}
    assert {u["state"] for u in dropping.values()} == {"STOPPING"}
    assert set(h.sup.running(NAME)) == set(rows(h))  # still listed while they stop
    await h.polls(20)
    assert set(rows(h)) == {"proxy", "prefill-0", "decode-0"}
    assert set(h.sup.running(NAME)) == {"proxy", "prefill-0", "decode-0"}
    assert spawns(h, before) == ["proxy"]  # its instance list changed; the dropped: never
    killed = {name for name, sig in h.backend.signals if sig == 9}
    assert {"prefill-1", "decode-1"} <= killed
    assert h.backend.read(h.sup.deployments[NAME].folder, "decode-1") is None  # forgotten


async def test_a_dropped_process_that_dies_while_stopping_is_not_started_again(tmp_path):
    h = Harness(tmp_path, backend=FakeBackend(obey_term=False))
    ports = await running(h, pairs())
    before = len(h.backend.spawned)
    one = pairs(count=1)
    await h.sup.start(NAME, one, kept_ports(pairs(), ports, one), revision=2)
    h.backend.crash("decode-1", -11)  # dies on its own before the supervisor kills it
    await h.polls(20)
    assert "decode-1" not in rows(h) and spawns(h, before) == ["proxy"]


async def test_only_drops_the_named_processes_the_revision_no_longer_has(tmp_path):
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    one = pairs(count=1)
    await h.sup.start(NAME, one, kept_ports(pairs(), ports, one), revision=2, only={"decode-1"})
    await h.polls(10)
    now = rows(h)
    assert "decode-1" not in now
    assert now["prefill-1"]["state"] == "RUNNING" and now["prefill-1"]["revision"] == 1
    assert not now["prefill-1"]["dropping"]  # not yet: the next batch drops it


# -- the run dir: each process's revision, kept across supervisors ---------------------------


def test_the_run_dir_keeps_the_revision_of_each_process_and_the_older_specs(tmp_path):
    old, new = pairs(), pairs(decode_args=SEEDED)
    ports = allocate(old)
    run_state.save_deployment(
        tmp_path, new, ports, revision=3, units={"decode-1": 2, "proxy": 3}, older={2: (old, ports)}
    )
    revision, units, older = run_state.load_revisions(tmp_path / run_state.DEPLOYMENT_FILE)
    assert revision == 3 and units == {"decode-1": 2, "proxy": 3}
    assert list(older) == [2] and older[2][0] == old and older[2][1] == ports
    assert run_state.load_deployment(tmp_path / run_state.DEPLOYMENT_FILE)[0] == new


@pytest.mark.parametrize(
    "saved",
    [
        {"spec": {}, "ports": {}, "running": True},  # written before revisions were kept
        {"revision": "three", "units": {}, "older": {}},
        {"revision": 2, "units": {"decode-0": 2}, "older": {"2": {"spec": {"nope": 1}}}},
    ],
    ids=["before-revisions", "not-a-number", "older-unreadable"],
)
def test_a_run_dir_without_readable_revisions_gives_none(tmp_path, saved):
    path = tmp_path / run_state.DEPLOYMENT_FILE
    path.write_text(json.dumps(saved))
    assert run_state.load_revisions(path) == (None, {}, {})


async def test_a_new_supervisor_adopts_a_half_rolled_deployment_as_each_process_runs(tmp_path):
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    await h.sup.start(NAME, pairs(decode_args=SEEDED), ports, revision=2, only={"decode-0"})
    await h.polls(4)
    pids = {n: u["pid"] for n, u in rows(h).items()}
    before = len(h.backend.spawned)

    h.sup = h.new()  # the control plane restarts; every process lives on
    adopted = rows(h)
    assert {n: u["pid"] for n, u in adopted.items()} == pids
    assert {n: u["revision"] for n, u in adopted.items()} == {
        "proxy": 2,
        "prefill-0": 2,
        "prefill-1": 2,
        "decode-0": 2,
        "decode-1": 1,
    }
    # each rendered from the revision it runs: decode-1 is not taken for a changed process
    assert "--seed" in adopted["decode-0"]["command"]
    assert "--seed" not in adopted["decode-1"]["command"]
    await h.polls(4)
    assert spawns(h, before) == [] and {u["state"] for u in rows(h).values()} == {"RUNNING"}
    assert set(h.sup.deployments[NAME].older) == {1}


async def test_a_new_supervisor_adopts_processes_an_unfinished_layout_change_still_runs(
    tmp_path,
):
    """Mid-way from two instances per role to one: the dropped pair still runs revision 1's
    launch, adopted as dropping (stopped by the rollout's next batch, never restarted)."""
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    one = pairs(count=1, decode_args=SEEDED)
    await h.sup.start(NAME, one, kept_ports(pairs(), ports, one), revision=2, only={"decode-0"})
    await h.polls(4)
    pids = {n: u["pid"] for n, u in rows(h).items()}

    h.sup = h.new()
    adopted = rows(h)
    assert {n: u["pid"] for n, u in adopted.items()} == pids
    assert {n: (u["revision"], u["dropping"]) for n, u in adopted.items()} == {
        "proxy": (1, False),  # it lists the instances of revision 1 still (a NIXL proxy)
        "prefill-0": (2, False),
        "decode-0": (2, False),
        "prefill-1": (1, True),
        "decode-1": (1, True),
    }
    await h.polls(4)
    assert {u["state"] for u in rows(h).values()} == {"RUNNING"}


async def test_a_new_supervisor_leaves_unstarted_what_an_unfinished_layout_change_had_not_started(
    tmp_path,
):
    """Issue 34's story: two instances per role renamed into two groups of one, the plane
    stopped after the first batch. The second batch's instances were never started: the new
    supervisor leaves them to the rollout it takes over (which starts them in their batch,
    after the ones still serving are drained), rather than starting them on its own."""
    h = Harness(tmp_path)
    two = pairs()
    ports = await running(h, two)
    renamed = tiny_pair(
        NAME,
        groups=[
            {"name": "p-a", "role": "prefill"},
            {"name": "p-b", "role": "prefill"},
            {"name": "d-a", "role": "decode"},
            {"name": "d-b", "role": "decode"},
        ],
    )
    batch = {"prefill-0", "decode-0", "p-a-0", "d-a-0"}
    await h.sup.start(NAME, renamed, kept_ports(two, ports, renamed), revision=2, only=batch)
    await h.polls(10)
    assert set(rows(h)) == {"proxy", "p-a-0", "d-a-0", "prefill-1", "decode-1"}
    before = len(h.backend.spawned)

    h.sup = h.new()
    await h.polls(6)
    assert set(rows(h)) == {"proxy", "p-a-0", "d-a-0", "prefill-1", "decode-1"}
    assert spawns(h, before) == []
    assert set(h.sup.running(NAME)) == set(rows(h))  # a rollout planned now starts p-b, d-b


# -- changed in place: a role move, a proxy told its instances ------------------------------


def switching(serving: dict[str, str] | None = None) -> DeploymentSpec:
    """Two instances per role, started for runtime role switching; `serving`: moved ones."""
    return DeploymentSpec.model_validate(
        {**pairs().model_dump(), "role_switch": {"serving": serving or {}}}
    )


def launch_of(h: Harness, process: str):
    return h.sup.running(NAME)[process][0]


@pytest.mark.parametrize("restarts", [1, 2], ids=["one-restart", "two-restarts"])
async def test_a_role_moved_in_place_is_still_its_launch_after_the_plane_restarts(
    tmp_path, restarts
):
    """Found by the model-based test: an instance moved to decode in place (no restart) was
    adopted by the next control plane as the prefill its command line started it as, so an
    undo to before the move found nothing to change, settled applied, and it served decode on.
    What a process was told in place is what it runs, for every later supervisor."""
    h = Harness(tmp_path)
    ports = await running(h, switching())
    started = launch_of(h, "prefill-0")
    moved = switching({"prefill-0": "decode"})
    h.sup.keep_all(NAME, moved, 2)
    told = {n: launch_of(h, n) for n in ("proxy", "prefill-0")}
    assert told["prefill-0"].argv != started.argv and told["prefill-0"].role == "decode"
    pids = {n: u["pid"] for n, u in rows(h).items()}
    before = len(h.backend.spawned)

    for _ in range(restarts):
        h.sup = h.new()
        await h.polls(3)
    assert {n: u["pid"] for n, u in rows(h).items()} == pids and spawns(h, before) == []
    assert {n: launch_of(h, n) for n in told} == told
    assert {u["revision"] for u in rows(h).values()} == {2}
    assert h.sup.launches(NAME, moved, ports) == [launch_of(h, n) for n in rows(h)]

    h.backend.crash("prefill-0")  # a later restart starts it as it serves now
    await h.polls(12)
    respawned = [argv for name, argv, _ in h.backend.spawned[before:] if name == "prefill-0"]
    assert respawned == [told["prefill-0"].argv]


async def test_a_switch_cut_short_is_still_adopted_as_the_command_it_runs(tmp_path):
    """The other side of the one above: a process whose command line differs from its desired
    launch, and that was never told otherwise, runs its command line (the next rollout
    restarts it)."""
    h = Harness(tmp_path)
    ports = await running(h, pairs())
    saved = h.sup.deployments[NAME].folder
    run_state.save_deployment(saved, pairs(decode_args=SEEDED), ports, revision=2)
    h.sup = h.new()
    assert "--seed" not in launch_of(h, "decode-0").argv


def listed(argv: list[str]) -> list[tuple[str, str]]:
    """The instances a proxy command line lists: (flag, URL)."""
    return [(f, argv[i + 1]) for i, f in enumerate(argv) if f in ("--prefill", "--decode")]


@pytest.mark.parametrize("plane_restarts", [0, 1, 2])
async def test_a_proxy_restarted_mid_rollout_lists_what_it_was_told(tmp_path, plane_restarts):
    """Found by the model-based test: a rollout tells the running proxy its instances as they
    come and go (its admin API); a proxy that crashed mid-rollout was started again with its
    revision's list, the instances the rollout was moving away from, and once those stopped
    it had no prefill to route to. It restarts listing what it was told, also when a later
    control plane adopted it."""
    h = Harness(tmp_path)
    await running(h, pairs())
    dep = h.sup.deployments[NAME]
    urls = {n: u.launch.url for n, u in dep.units.items()}
    new = "http://127.0.0.1:1/"  # an instance a rollout started, told as a decode
    h.sup.proxy_told(NAME, new, "decode")
    h.sup.proxy_told(NAME, urls["prefill-1"], "decode")  # moved: listed once, as a decode
    h.sup.proxy_told(NAME, urls["decode-0"], None)  # forgotten
    told = listed(launch_of(h, "proxy").argv)
    assert told == [
        ("--prefill", urls["prefill-0"]),
        ("--decode", urls["decode-1"]),
        ("--decode", "http://127.0.0.1:1"),
        ("--decode", urls["prefill-1"]),
    ]
    before = len(h.backend.spawned)
    for _ in range(plane_restarts):
        h.sup = h.new()
        await h.polls(3)
        assert listed(launch_of(h, "proxy").argv) == told
    assert spawns(h, before) == []  # told, never restarted for it

    h.backend.crash("proxy")
    await h.polls(12)
    respawned = [argv for name, argv, _ in h.backend.spawned[before:] if name == "proxy"]
    assert len(respawned) == 1 and listed(respawned[0]) == told


async def test_a_proxy_told_back_its_own_list_runs_its_command_line(tmp_path):
    """Told a change and then its undoing, the proxy runs its command line again: nothing is
    kept as told in place (a later plane adopts it as it started)."""
    h = Harness(tmp_path)
    await running(h, pairs())
    url = h.sup.deployments[NAME].units["decode-0"].launch.url  # listed before decode-1
    started = launch_of(h, "proxy").argv
    h.sup.proxy_told(NAME, url, None)
    assert h.sup.deployments[NAME].told_in_place()["proxy"].runs == tuple(
        launch_of(h, "proxy").argv
    )
    h.sup.proxy_told(NAME, url, "decode")
    assert launch_of(h, "proxy").argv == started
    assert h.sup.deployments[NAME].told_in_place() == {}


async def test_a_proxy_told_of_another_deployment_is_no_error(tmp_path):
    h = Harness(tmp_path)
    h.sup.proxy_told("nobody", "http://127.0.0.1:1", "decode")
    assert h.sup.deployments == {}
