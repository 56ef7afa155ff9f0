"""controller/supervise/machine/ by scripted histories on a fake clock: each test is a list of
(time, event) and what the machine must say and do."""

import signal

import pytest

from controller.supervise.machine import (
    Adopt,
    Drain,
    Drained,
    Emit,
    Exited,
    HealthFailed,
    Healthy,
    Kill,
    Machine,
    MachineMisuse,
    Policy,
    Restart,
    Schedule,
    Spawn,
    Spawned,
    Start,
    State,
    Stop,
    Tick,
    Undrain,
    step,
    uptime,
)

POLICY = Policy(
    backoff_base=1.0,
    backoff_cap=8.0,
    max_failed_starts=5,
    start_timeout=60.0,
    drain_timeout=10.0,
    term_timeout=5.0,
    kill_timeout=3.0,
)


def replay(history, machine=None):
    """Run (time, event) pairs; return the final machine and every (time, action)."""
    machine = machine or Machine(policy=POLICY)
    done = []
    for now, event in history:
        machine, actions = step(machine, event, now)
        done += [(now, a) for a in actions]
    return machine, done


def kinds(done, kind=None):
    return [
        a
        for _, a in done
        if not isinstance(a, Emit | Schedule) and (kind is None or isinstance(a, kind))
    ]


def emitted(done):
    return [a.kind for _, a in done if isinstance(a, Emit)]


def running(at=0.0, pid=100):
    return replay([(at, Start()), (at, Spawned(pid)), (at + 1, Healthy())])[0]


def test_start_spawns_then_health_makes_it_running():
    mach, done = replay([(0, Start()), (0.1, Spawned(42)), (2.0, Healthy())])
    assert mach.state is State.RUNNING and mach.pid == 42 and mach.ready_at == 2.0
    assert kinds(done) == [Spawn(), Undrain()]
    assert (0, Schedule(60.0)) in done  # the start timeout
    assert emitted(done) == ["starting", "spawned", "ready"]
    assert uptime(mach, 5.0) == 5.0


def test_backoff_doubles_then_gives_up_fatal_after_five_failed_starts():
    history = [(0, Start())]
    t = 0.0
    # Each try: spawned, exits with 1 before ready; the next try comes at the backoff deadline.
    for i in range(5):
        history += [(t, Spawned(10 + i)), (t + 0.5, Exited(1))]
        t += 0.5
        delay = min(8.0, 2.0**i)
        history += [(t + delay - 0.01, Tick()), (t + delay, Tick())]  # early tick: nothing
        t += delay
    mach, done = replay(history[:-2])  # stop before the (never scheduled) sixth try
    assert mach.state is State.FATAL and mach.failures == 5 and mach.last_exit == 1
    assert len(kinds(done, Spawn)) == 5
    schedules = [a.at - now for now, a in done if isinstance(a, Schedule) and a.at - now < 60]
    assert schedules == [1.0, 2.0, 4.0, 8.0]  # doubling, capped at 8
    assert emitted(done)[-1] == "fatal"
    # FATAL stays FATAL with time; an operator start tries again with a clean count.
    mach, _ = step(mach, Tick(), 1000.0)
    assert mach.state is State.FATAL
    mach, actions = step(mach, Start(), 1001.0)
    assert mach.state is State.STARTING and mach.failures == 0 and Spawn() in actions


def test_not_ready_before_the_start_timeout_counts_as_a_failed_start():
    mach, done = replay([(0, Start()), (0, Spawned(7)), (59.9, Tick()), (60.0, Tick())])
    assert mach.state is State.STOPPING and kinds(done, Kill) == [Kill(signal.SIGTERM)]
    mach, done = replay([(60.2, Exited(-15))], mach)
    assert mach.state is State.BACKOFF and mach.failures == 1 and mach.deadline == 61.2


def test_stop_drains_then_sigterm_then_sigkill_of_the_group():
    mach = running()
    mach, done = replay(
        [
            (10.0, Stop()),  # drain first
            (20.0, Tick()),  # drain timeout (10 s): SIGTERM
            (24.9, Tick()),  # not yet
            (25.0, Tick()),  # term timeout (5 s): SIGKILL
            (25.1, Exited(-9)),
        ],
        mach,
    )
    assert kinds(done) == [Drain(), Kill(signal.SIGTERM), Kill(signal.SIGKILL)]
    times = [now for now, a in done if isinstance(a, Kill)]
    assert times == [20.0, 25.0]
    assert mach.state is State.STOPPED and mach.pid is None and mach.last_exit == -9
    assert "killed" in emitted(done) and emitted(done)[-1] == "stopped"


def test_stop_goes_straight_to_sigterm_once_drained_and_stops_on_exit():
    mach, done = replay(
        [(10.0, Stop()), (10.5, Drained()), (11.0, Exited(0)), (30.0, Tick())], running()
    )
    assert kinds(done) == [Drain(), Kill(signal.SIGTERM)]
    assert mach.state is State.STOPPED and mach.deadline is None


def test_a_process_that_survives_sigkill_is_fatal():
    mach, _ = replay([(10.0, Stop()), (20.0, Tick()), (25.0, Tick()), (28.0, Tick())], running())
    assert mach.state is State.FATAL


def test_crash_of_a_running_instance_restarts_with_backoff():
    mach, done = replay([(100.0, Exited(-9))], running())
    assert mach.state is State.BACKOFF and mach.failures == 1 and mach.deadline == 101.0
    assert kinds(done) == [Drain()]  # the proxy stops routing to it meanwhile
    mach, done = replay([(101.0, Tick()), (101.1, Spawned(101)), (103.0, Healthy())], mach)
    assert mach.state is State.RUNNING and mach.restarts == 1 and mach.pid == 101
    assert kinds(done) == [Spawn(), Undrain()]


def test_a_successful_run_resets_the_failure_count():
    # Three failed starts, then one that becomes ready: the count starts over, so a later
    # crash waits the base delay again and FATAL is five *consecutive* failures away.
    mach, _ = replay(
        [
            (0, Start()),
            (0, Spawned(1)),
            (0.1, Exited(1)),
            (1.1, Tick()),
            (1.1, Spawned(2)),
            (1.2, Exited(1)),
            (3.2, Tick()),
            (3.2, Spawned(3)),
            (3.3, Exited(1)),
        ]
    )
    assert mach.failures == 3 and mach.deadline == pytest.approx(7.3)
    mach, _ = replay([(7.3, Tick()), (7.3, Spawned(4)), (8.0, Healthy())], mach)
    assert mach.state is State.RUNNING and mach.failures == 0 and mach.restarts == 3
    mach, _ = replay([(50.0, Exited(1))], mach)
    assert mach.state is State.BACKOFF and mach.deadline == 51.0


def test_health_failure_of_a_running_instance_replaces_it():
    mach, done = replay([(10.0, HealthFailed("3 probes failed")), (11.0, Exited(-15))], running())
    assert kinds(done) == [Drain(), Kill(signal.SIGTERM), Drain()]
    assert mach.state is State.BACKOFF and mach.failures == 1
    # While starting, failed probes are expected and change nothing.
    starting = replay([(0, Start()), (0, Spawned(5))])[0]
    assert step(starting, HealthFailed(), 1.0)[0] == starting


def test_operator_restart_is_not_a_failure():
    mach, done = replay([(10.0, Restart()), (10.1, Drained()), (10.5, Exited(0))], running())
    assert mach.state is State.STARTING and mach.failures == 0 and mach.restarts == 1
    assert kinds(done) == [Drain(), Kill(signal.SIGTERM), Spawn()]


def test_adoption_of_a_live_pid_waits_for_health_without_spawning():
    mach, done = replay([(0.0, Adopt(pid=4242, alive=True, restarts=2)), (0.3, Healthy())])
    assert mach.state is State.RUNNING and mach.pid == 4242 and mach.restarts == 2
    assert kinds(done, Spawn) == []
    assert emitted(done) == ["adopted", "ready"]
    # Adopted, then stopped: the same escalation as for a process we spawned.
    mach, done = replay([(5.0, Stop()), (15.0, Tick()), (20.0, Tick()), (20.1, Exited(None))], mach)
    assert kinds(done) == [Drain(), Kill(signal.SIGTERM), Kill(signal.SIGKILL)]
    assert mach.state is State.STOPPED


def test_adoption_of_a_dead_pid_is_exited_and_start_spawns_fresh():
    mach, _ = replay([(0.0, Adopt(pid=4242, alive=False, exit_code=-9))])
    assert mach.state is State.EXITED and mach.pid is None and mach.last_exit == -9
    mach, actions = step(mach, Start(), 1.0)
    assert mach.state is State.STARTING and Spawn() in actions and mach.restarts == 1
    with pytest.raises(MachineMisuse):
        step(mach, Adopt(pid=1, alive=True), 2.0)


def test_stop_in_backoff_cancels_the_retry():
    mach, _ = replay([(100.0, Exited(1)), (100.5, Stop()), (200.0, Tick())], running())
    assert mach.state is State.STOPPED and mach.deadline is None


def test_stop_while_the_spawn_is_in_flight_signals_once_the_pid_is_known():
    mach, done = replay([(0, Start()), (0.1, Stop()), (0.2, Spawned(9)), (0.3, Exited(-15))])
    assert kinds(done) == [Spawn(), Kill(signal.SIGTERM)]
    assert mach.state is State.STOPPED


def test_start_while_stopping_comes_back_after_the_exit():
    mach, done = replay(
        [(10.0, Stop()), (10.2, Start()), (10.3, Drained()), (11.0, Exited(0))], running()
    )
    assert mach.state is State.STARTING and kinds(done)[-1] == Spawn()


def test_exit_with_autorestart_off_stays_exited():
    mach = running()
    mach = Machine(
        **{**{f: getattr(mach, f) for f in mach.__slots__}, "policy": Policy(autorestart=False)}
    )
    mach, done = replay([(9.0, Exited(3)), (99.0, Tick())], mach)
    assert mach.state is State.EXITED and mach.last_exit == 3 and kinds(done) == [Drain()]


def test_stale_events_change_nothing():
    stopped = Machine(policy=POLICY)
    for event in (Healthy(), HealthFailed(), Exited(0), Drained(), Tick(), Stop()):
        assert step(stopped, event, 1.0) == (stopped, [])


def test_restart_while_the_spawn_is_in_flight_spawns_once_more_after_its_exit():
    # Found by the model-based test (tests/model/, seed 3): a rollback's restart arrived while
    # the aborted rollout's spawn of the same instance was in flight; a second spawn began at
    # once, the first process was orphaned holding the ports, and every later start of the
    # instance failed on them (FATAL) while the orphan ran on, shown nowhere.
    mach, done = replay([(0, Start()), (0.1, Restart())])
    assert kinds(done) == [Spawn()]  # one process on its way, not two
    assert mach.state is State.STOPPING
    mach, done = replay([(0.2, Spawned(9)), (0.3, Exited(-15))], mach)
    assert kinds(done) == [Kill(signal.SIGTERM), Spawn()]  # the first one down, then again
    assert mach.state is State.STARTING and mach.pid is None and mach.failures == 0
