"""The switch runner on fakes (controller/switch/steps.py's seams, no socket, a fake clock):
desired state first, each strategy's run, each failure point and what undo puts back."""

import asyncio

import pytest

from controller.clients.proxy_admin import ProxyAdminError
from controller.launch.ports import allocate
from controller.spec.deployment import Mode
from controller.supervise.supervisor import SupervisorError
from controller.switch.plan import with_modes
from controller.switch.runner import STOPPED_MID_SWITCH, StoreRevisions, SwitchBusy, SwitchRunner
from controller.switch.steps import Timeouts
from services.admission import Admission
from state import migrate
from state.db import create_engine
from state.errors import ChangeInProgress
from state.store import Store
from tests.controller.factories import moriio_pairs
from tests.controller.fakes import FakeClock, FakeFleet, FakeProxyAdmin, FakeRevisions

TIMEOUTS = Timeouts(idle_s=5.0, ready_s=5.0, poll_s=0.5)


class Rig:
    def __init__(self, pairs: int = 1, mode: str = "read") -> None:
        self.log: list = []
        self.clock = FakeClock()
        self.spec = moriio_pairs(pairs, mode)
        self.ports = allocate(self.spec)
        self.fleet = FakeFleet(self.spec, self.ports, self.clock, self.log)
        self.admin = FakeProxyAdmin(self.fleet, self.spec.name, self.log)
        self.revisions = FakeRevisions(self.log)
        self.events: list = []
        self.runner = SwitchRunner(
            self.fleet,
            lambda *event: self.events.append(event),
            clock=self.clock,
            admin_for=lambda name, ports: self.admin,
            timeouts=TIMEOUTS,
        )

    def url(self, instance: str) -> str:
        return f"http://127.0.0.1:{self.ports.instances[instance].http}"

    def begin(self, target: str, strategy: str):
        return self.runner.begin(
            self.spec.name, self.spec, self.ports, target, strategy, "alice", "test", self.revisions
        )

    async def switch(self, target: str, strategy: str):
        rec = self.begin(target, strategy)
        return await self.runner.wait(self.spec.name, rec.id)

    async def recover(self, revision: int, target, strategy=None):
        rec = self.runner.recover(self.spec.name, revision, target, self.revisions, strategy)
        return await self.runner.wait(self.spec.name, rec.id)

    def index(self, what: str) -> int:
        return next(i for i, entry in enumerate(self.log) if entry[0] == what)

    def routing_restored(self) -> bool:
        return not (self.admin.paused or self.admin.drained or self.admin.whole)


def run(coro):
    return asyncio.run(coro)


# -- runs -----------------------------------------------------------------------------------


def test_hold_writes_the_target_revision_before_any_restart_and_settles_it_applied():
    rig = Rig()
    rec = run(rig.switch("write", "hold"))
    assert rec.state == "done" and rec.error is None
    assert rig.log[0] == ("begin", ("write", "write"))  # desired state first
    assert rig.index("begin") < rig.index("pause") < rig.index("start")
    assert rig.log[-1] == ("settle", 2, "applied")
    assert rec.revision == 2 and rec.revision_state == "applied" and rec.id == "r2"
    assert rec.held_s is not None and rec.held_s >= 1.0  # the fleet restarts in 1 s
    assert rig.routing_restored() and rig.admin.closed
    assert [s["step"] for s in rec.timings] == rec.steps


def test_the_proxy_expects_both_modes_during_the_switch_and_only_the_new_one_after():
    rig = Rig()
    run(rig.switch("write", "hold"))
    expects = [entry[1] for entry in rig.log if entry[0] == "expect"]
    assert expects == [(("read", "write"),) * 2, (("write",),) * 2]
    assert rig.index("expect") < rig.index("pause")


def test_keep_serving_runs_whole_requests_while_each_side_restarts():
    rig = Rig(mode="write")
    rec = run(rig.switch("read", "keep-serving"))
    assert rec.state == "done" and rec.degraded_s is not None and rec.held_s is None
    assert [e[1] for e in rig.log if e[0] == "start"] == [("read", "write"), ("read", "read")]
    first_whole = rig.log.index(("whole", rig.url("decode-0"), True))
    assert first_whole < rig.log.index(("drain", rig.url("prefill-0")))
    assert "pause" not in {e[0] for e in rig.log}
    assert rig.routing_restored()


def test_roll_restarts_one_pair_at_a_time_and_holds_nothing():
    rig = Rig(pairs=2)
    rec = run(rig.switch("write", "roll"))
    assert rec.state == "done" and rec.held_s is None
    starts = [e[1] for e in rig.log if e[0] == "start"]
    assert starts == [("write", "write", "read", "read"), ("write",) * 4]
    # the second pair is still serving (not drained) while the first restarts
    second = rig.log.index(("drain", rig.url("prefill-1-0")))
    assert rig.log.index(("undrain", rig.url("prefill-0-0"))) < second
    assert rig.routing_restored()


def test_the_events_name_the_revision_and_how_it_settled():
    rig = Rig()
    run(rig.switch("write", "hold"))
    kinds = [e[1] for e in rig.events]
    assert kinds == ["switch.begin", "switch.done"]
    assert "revision 2, in progress" in rig.events[0][2]
    assert "revision 2 applied" in rig.events[1][2] and "requests held" in rig.events[1][2]


# -- refusals before anything runs ------------------------------------------------------------


def test_nothing_is_written_when_an_instance_is_not_running():
    rig = Rig()
    rig.fleet.ready_at["decode-0"] = float("inf")
    with pytest.raises(SwitchBusy, match="decode-0 is STARTING"):
        rig.begin("write", "hold")
    assert rig.revisions.begun == [] and rig.log == []


def test_a_second_switch_while_one_runs_is_refused_and_writes_no_revision():
    async def scenario():
        rig = Rig()
        first = rig.begin("write", "hold")
        with pytest.raises(SwitchBusy, match="in progress"):
            rig.begin("write", "hold")
        assert len(rig.revisions.begun) == 1
        return await rig.runner.wait(rig.spec.name, first.id)

    assert run(scenario()).state == "done"


def test_a_store_that_refuses_the_revision_starts_nothing():
    class Refusing(FakeRevisions):
        def begin(self, *args):
            raise ChangeInProgress("mori", 5, "an edit")

    rig = Rig()
    rig.revisions = Refusing(rig.log)
    with pytest.raises(ChangeInProgress, match="in progress"):
        rig.begin("write", "hold")
    assert rig.log == [] and rig.runner.history(rig.spec.name) == []


# -- failure points: the record names the step, undo puts routing back -------------------------

DOWN = ProxyAdminError("POST /admin/groups/read/pause: 503", 503)


def _pause_fails(rig):
    rig.admin.fail["pause"] = DOWN


def _in_flight_forever(rig):
    rig.admin.outstanding[rig.url("prefill-0")] = 3


def _apply_fails(rig):
    rig.fleet.start_fails = SupervisorError("no deployment 'mori' is supervised")


def _never_ready(rig):
    rig.fleet.never_ready.add("decode-0")


def _proxy_refuses_expectations(rig):
    rig.admin.fail["expect"] = ProxyAdminError("PUT /admin/registry/expected: 401", 401)


@pytest.mark.parametrize(
    ("fault", "step", "says", "revision_state", "started"),
    [
        (_proxy_refuses_expectations, "expect both modes", "401", "rolled_back", 0),
        (_pause_fails, "pause read", "503", "rolled_back", 0),
        (_in_flight_forever, "wait_idle prefill-0, decode-0", "still serving", "rolled_back", 0),
        (_apply_fails, "apply prefill-0, decode-0", "is supervised", "failed", 1),
        (_never_ready, "wait_ready prefill-0, decode-0", "not ready in write", "failed", 1),
    ],
)
def test_a_failed_hold_step_is_named_and_routing_is_put_back(
    fault, step, says, revision_state, started
):
    rig = Rig()
    fault(rig)
    rec = run(rig.switch("write", "hold"))
    assert rec.state == "failed" and rec.failed_step == step and says in rec.error
    assert rec.revision_state == revision_state
    assert rig.revisions.settled[-1][2] == revision_state
    assert f"failed at {step!r}" in rig.revisions.settled[-1][3]
    assert sum(e[0] == "start" for e in rig.log) == started
    assert rig.admin.paused == set()  # the held group is released, whatever failed
    assert rig.events[-1][1] == "switch.failed" and step in rig.events[-1][2]


def test_undo_after_a_failed_restart_resumes_the_held_group_and_narrows_expectations():
    rig = Rig()
    rig.fleet.never_ready.add("prefill-0")
    rec = run(rig.switch("write", "hold"))
    assert rec.failed_step.startswith("wait_ready")
    undo = rig.log[rig.log.index(("pause", "read")) + 1 :]
    assert ("resume", "read") in undo
    # what runs now (the new spec, as far as it started) is what the proxy expects after
    assert undo.index(("resume", "read")) < undo.index(("expect", (("write",),) * 2))
    assert rig.routing_restored() and rig.log[-1] == ("settle", 2, "failed")


def test_a_resume_that_fails_is_tried_again_by_undo_and_reported_if_it_still_fails():
    rig = Rig()
    rig.admin.fail["resume"] = ProxyAdminError("POST /admin/groups/read/resume: timed out")
    rec = run(rig.switch("write", "hold"))
    assert rec.failed_step == "resume read"
    assert sum(e == ("resume", "read") for e in rig.log) == 2  # the step, then undo
    assert rec.undo_left and "resume read" in rec.undo_left[0]
    assert rec.revision_state == "failed" and "not undone" in rig.events[-1][2]


def test_keep_serving_failing_on_the_decode_side_ends_whole_requests_and_undrains():
    rig = Rig(mode="write")
    rig.fleet.never_ready.add("decode-0")
    rec = run(rig.switch("read", "keep-serving"))
    assert rec.failed_step == "wait_ready decode-0"
    assert rig.routing_restored()  # whole flags off on both sides, decode undrained
    assert ("whole", rig.url("prefill-0"), False) in rig.log
    assert ("undrain", rig.url("decode-0")) in rig.log


def test_roll_failing_on_the_second_pair_leaves_the_first_serving_in_the_new_mode():
    rig = Rig(pairs=2)
    rig.fleet.never_ready.add("decode-1-0")
    rec = run(rig.switch("write", "roll"))
    assert rec.failed_step == "wait_ready prefill-1-0, decode-1-0"
    assert rig.routing_restored() and rec.revision_state == "failed"
    modes = {g.name: g.mode.value for g in rig.fleet.deployments["mori"].spec.groups}
    assert modes == {g: "write" for g in ("prefill-0", "decode-0", "prefill-1", "decode-1")}


def test_cancelling_a_switch_undoes_it_and_settles_the_revision():
    async def scenario():
        rig = Rig()
        rig.fleet.never_ready.add("decode-0")
        rec = rig.begin("write", "hold")
        while rec.current is None or not rec.current.startswith("wait_ready"):
            await asyncio.sleep(0)
        await rig.runner.close()
        return rig, rec

    rig, rec = run(scenario())
    assert rec.state == "failed" and "cancelled" in rec.error
    assert rec.failed_step.startswith("wait_ready")
    assert rig.admin.paused == set() and rig.revisions.settled[-1][2] == "failed"


# -- a switch a stopped control plane left in progress ---------------------------------------


def test_a_switch_left_in_progress_is_settled_applied_once_the_target_runs_and_is_ready():
    rig = Rig(mode="write")  # adopted: the apply had happened before the plane stopped
    rig.admin.paused.add("read")  # ...and the hold had not been released
    rec = run(rig.recover(7, moriio_pairs(1, "write")))
    assert rec.id == "r7" and rec.strategy == "recover" and rec.state == "done"
    assert rig.revisions.settled == [("mori", 7, "applied", "switch r7 done")]
    assert rig.routing_restored()
    assert rig.events[0][1] == "switch.recover" and rig.events[-1][1] == "switch.done"


def test_a_half_done_switch_left_in_progress_is_settled_failed_with_routing_put_back():
    rig = Rig(mode="read")
    rig.fleet.deployments["mori"].spec = with_modes(rig.spec, {"prefill"}, Mode.WRITE)
    rig.admin.whole.add(rig.url("decode-0"))
    rig.admin.drained.add(rig.url("prefill-0"))
    rec = run(rig.recover(7, moriio_pairs(1, "write")))
    assert rec.state == "failed" and rig.revisions.settled[-1][2] == "failed"
    assert "not the target" in rig.revisions.settled[-1][3]
    assert rig.routing_restored()
    assert "start" not in {e[0] for e in rig.log}  # nothing restarted without a strategy


def test_instances_adopted_in_the_old_mode_are_switched_again_by_the_strategy_of_the_revision():
    rig = Rig(mode="write")  # the supervisor had been told the target...
    rig.fleet.adopted = {"prefill-0": "read", "decode-0": "read"}  # ...but nothing restarted
    rig.admin.paused.add("read")
    rec = run(rig.recover(7, moriio_pairs(1, "write"), "hold"))
    assert rec.steps[:4] == ["resume read", "resume write", *rec.steps[2:4]]
    assert rec.steps[4:] == [
        "hold_begin",
        "pause read",
        "wait_idle prefill-0, decode-0",
        "apply prefill-0, decode-0",
        "wait_ready prefill-0, decode-0",
        "hold_end",
        "resume read",
    ]
    assert rec.state == "done" and rig.revisions.settled[-1][2] == "applied"
    assert [e[1] for e in rig.log if e[0] == "start"] == [("write", "write")]
    assert rig.routing_restored()


def test_a_switch_left_in_progress_of_a_deployment_not_supervised_is_settled_failed():
    rig = Rig()
    assert rig.runner.recover("gone", 3, rig.spec, rig.revisions) is None
    assert rig.revisions.settled == [("gone", 3, "failed", STOPPED_MID_SWITCH)]


# -- with the real store (a SQLite file migrated to head) ---------------------------------------


@pytest.fixture
def store(tmp_path):
    db = tmp_path / "pdctl.db"
    migrate.upgrade(db)
    engine = create_engine(db)
    yield Store(engine, Admission((43000, 43999), False, lambda port: False))
    engine.dispose()


def test_the_store_holds_the_target_as_desired_and_in_progress_while_the_switch_runs(store):
    async def scenario():
        rig = Rig()
        store.create(rig.spec, "alice")
        rig.revisions = StoreRevisions(store)
        rec = rig.begin("write", "hold")
        during = store.get("mori")
        with pytest.raises(ChangeInProgress):  # any other writer meanwhile: 409
            store.update("mori", rig.spec, "bob", "an edit")
        await rig.runner.wait("mori", rec.id)
        return rec, during

    rec, during = run(scenario())
    assert during.revision == rec.revision == 2 and during.state == "in_progress"
    assert {g.mode.value for g in during.spec.groups} == {"write"}
    after = store.get("mori")
    assert after.revision == 2 and after.state == "applied"


def test_a_switch_rolled_back_makes_the_previous_revision_desired_again_in_the_store(store):
    rig = Rig()
    store.create(rig.spec, "alice")
    rig.revisions = StoreRevisions(store)
    rig.admin.fail["pause"] = DOWN
    rec = run(rig.switch("write", "hold"))
    assert rec.revision_state == "rolled_back"
    after = store.get("mori")
    assert after.revision == 1 and {g.mode.value for g in after.spec.groups} == {"read"}
    assert store.revision("mori", 2).state == "rolled_back"


@pytest.mark.parametrize("fails", [False, True])
def test_the_record_says_running_until_it_is_settled(fails):
    """A reader polling the record never sees it ended without its end: the CLI once printed
    'done in 0.0 s (revision 2 in progress)' between the last step and the settling."""

    class SlowToCount(FakeProxyAdmin):
        def __init__(self, *args) -> None:
            super().__init__(*args)
            self.gate = asyncio.Event()
            self.counted = 0

        async def rejected(self) -> int:
            self.counted += 1
            if self.counted > 1:  # the settling's count: the steps are over
                await self.gate.wait()
            return await super().rejected()

    async def scenario():
        rig = Rig()
        rig.admin = SlowToCount(rig.fleet, rig.spec.name, rig.log)
        if fails:
            _apply_fails(rig)
        rec = rig.begin("write", "hold")
        for _ in range(200):
            await asyncio.sleep(0)
            if rig.admin.counted > 1:
                break
        assert rig.admin.counted > 1  # settling now, held at its count
        assert rec.state == "running" and rec.revision_state == "in_progress"
        rig.admin.gate.set()
        done = await rig.runner.wait(rig.spec.name, rec.id)
        assert done.ended_at is not None and done.revision_state != "in_progress"
        assert done.state == ("failed" if fails else "done")

    run(scenario())
