"""The steps of a rollout for each strategy (controller/rollout/strategies.py): pure."""

import pytest

from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, render
from controller.rollout import strategies
from controller.rollout.changes import Action, Change, Running, changes, forced
from controller.rollout.strategies import Layout, RolloutRejected, start_ready
from controller.spec.deployment import DeploymentSpec, Mode
from controller.switch.plan import Step, StepKind
from tests.controller.factories import kept_ports, moriio_pairs, tiny_pair

SETTINGS = LaunchSettings(pdctl_command=("pdctl",))
MORIIO = Layout(registers=True)
NIXL = Layout(registers=False)
K = StepKind


def found(now: DeploymentSpec, wanted: DeploymentSpec) -> list[Change]:
    """What rolling `wanted` out over a healthy `now` changes (kept instances keep ports)."""
    ports_now = allocate(now)
    ports_wanted = kept_ports(now, ports_now, wanted)
    running = {
        launch.name: Running(launch, "RUNNING", True, 1)
        for launch in render(now, ports_now, SETTINGS)
    }
    return changes(running, render(wanted, ports_wanted, SETTINGS))


def described(steps: list[Step]) -> list[str]:
    return [s.describe() + (f" [{s.mode}]" if s.mode and s.instances else "") for s in steps]


def nixl(count: int = 1, **more: object) -> DeploymentSpec:
    groups = [
        {"name": "prefill", "role": "prefill", "count": count},
        {"name": "decode", "role": "decode", "count": count},
    ]
    return tiny_pair("nixl", groups=groups, **more)


def with_decode_seqs(spec: DeploymentSpec, seqs: int) -> DeploymentSpec:
    groups = [
        g.model_copy(update={"max_num_seqs": seqs}) if g.role.value == "decode" else g
        for g in spec.groups
    ]
    return spec.model_copy(update={"groups": groups})


def serving_throughout(start: set[str], steps: list[Step], roles: dict[str, str]) -> None:
    """Walk the steps: drained processes stop serving, ready ones serve again; every role
    keeps a serving instance at every step."""
    serving = set(start)
    for step in steps:
        if step.kind is K.DRAIN:
            serving -= set(step.instances)
        elif step.kind is K.WAIT_READY:
            serving |= set(step.instances)
        for role in set(roles.values()):
            assert any(roles[n] == role for n in serving), f"no {role} serving at {step}"


# -- which strategies a layout allows ------------------------------------------------------


def test_count_two_per_role_may_roll_and_rolls_by_default():
    spec = moriio_pairs(1, count=2)
    work = found(spec, moriio_pairs(1, "write", count=2))
    allowed = strategies.allowed(work, MORIIO)
    assert allowed["roll"] is None and allowed["hold"] is None and allowed["recreate"] is None
    assert "mode switch" in allowed["keep-serving"]
    assert strategies.default(work, MORIIO) == "roll"


def test_one_instance_per_role_cannot_roll_and_holds_by_default():
    work = found(moriio_pairs(1), moriio_pairs(1, "write"))
    allowed = strategies.allowed(work, MORIIO)
    assert allowed["roll"] == (
        "roll changes one prefill instance at a time while another serves; this deployment "
        "has 1 prefill instance: use hold"
    )
    assert strategies.default(work, MORIIO) == "hold"
    with pytest.raises(RolloutRejected, match="has 1 prefill instance: use hold"):
        strategies.plan("roll", work, moriio_pairs(1, "write"), MORIIO)


def test_keep_serving_is_allowed_for_a_mode_switch_only_and_planned_elsewhere():
    work = found(moriio_pairs(1), moriio_pairs(1, "write"))
    assert strategies.allowed(work, Layout(True, switch_only=True))["keep-serving"] is None
    with pytest.raises(RolloutRejected, match="planned by the mode switch"):
        strategies.plan("keep-serving", work, moriio_pairs(1, "write"), MORIIO)
    with pytest.raises(RolloutRejected, match="strategy must be one of roll, hold"):
        strategies.plan("teleport", work, moriio_pairs(1, "write"), MORIIO)


def test_one_role_changing_with_a_single_instance_cannot_roll():
    spec = moriio_pairs(1, count=2)
    groups = [g.model_copy(update={"count": 1}) if g.name == "decode" else g for g in spec.groups]
    one_decode = spec.model_copy(update={"groups": groups})
    work = found(one_decode, with_decode_seqs(one_decode, 8))
    assert "has 1 decode instance: use hold" in strategies.allowed(work, MORIIO)["roll"]


# -- roll ------------------------------------------------------------------------------------


def test_roll_on_one_group_with_count_two_moves_one_pair_at_a_time():
    spec, target = moriio_pairs(1, count=2), moriio_pairs(1, "write", count=2)
    steps = strategies.plan("roll", found(spec, target), target, MORIIO)
    assert described(steps) == [
        "drain prefill-0, decode-0",
        "wait_idle prefill-0, decode-0",
        "apply prefill-0, decode-0",
        "wait_ready prefill-0, decode-0 [write]",
        "undrain prefill-0, decode-0",
        "drain prefill-1, decode-1",
        "wait_idle prefill-1, decode-1",
        "apply prefill-1, decode-1",
        "wait_ready prefill-1, decode-1 [write]",
        "undrain prefill-1, decode-1",
    ]
    applies = [s for s in steps if s.kind is K.APPLY]
    assert [s.instances for s in applies] == [("prefill-0", "decode-0"), ("prefill-1", "decode-1")]
    assert all(s.spec is target for s in applies)  # each batch converges to the target
    assert K.PAUSE not in {s.kind for s in steps} and K.HOLD_BEGIN not in {s.kind for s in steps}
    roles = {f"{r}-{i}": r for r in ("prefill", "decode") for i in (0, 1)}
    serving_throughout(set(roles), steps, roles)


def found_with(now: DeploymentSpec, wanted: DeploymentSpec, states: dict[str, str]) -> list:
    """`found`, with some processes of `now` in another state than RUNNING."""
    ports = allocate(now)
    running = {
        launch.name: Running(launch, states.get(launch.name, "RUNNING"), True, 1)
        for launch in render(now, ports, SETTINGS)
    }
    return changes(running, render(wanted, kept_ports(now, ports, wanted), SETTINGS))


def test_roll_restarts_what_does_not_serve_first_and_counts_only_what_serves():
    # Found by the model-based test (tests/model/, seed 3): after a control-plane restart in
    # the middle of a roll, the resumed roll counted a prefill that was down as serving and
    # drained the only one that served: every request got 503 until one came back.
    spec, target = moriio_pairs(1, count=2), moriio_pairs(1, "write", count=2)
    work = found_with(spec, target, {"prefill-1": "BACKOFF", "decode-1": "EXITED"})
    assert [c.name for c in work if c.serving and c.role != "proxy"] == ["prefill-0", "decode-0"]
    steps = strategies.plan("roll", work, target, MORIIO)
    assert [s.instances for s in steps if s.kind is K.APPLY] == [
        ("prefill-1", "decode-1"),  # down already: restarting them takes nothing away
        ("prefill-0", "decode-0"),
    ]
    roles = {f"{r}-{i}": r for r in ("prefill", "decode") for i in (0, 1)}
    serving_throughout({"prefill-0", "decode-0"}, steps, roles)


def test_roll_is_refused_when_the_one_instance_serving_a_role_would_leave():
    spec = moriio_pairs(1, count=2)
    # prefill-1, down, is dropped; prefill-0, the one serving, must restart.
    groups = [
        g.model_copy(update={"count": 1, "max_num_seqs": 8}) if g.name == "prefill" else g
        for g in spec.groups
    ]
    work = found_with(spec, spec.model_copy(update={"groups": groups}), {"prefill-1": "BACKOFF"})
    assert strategies.default(work, MORIIO) == "hold"
    assert str(strategies.allowed(work, MORIIO)["roll"]).endswith(
        "this deployment has 2 prefill instances, 1 serving now: use hold"
    )


def test_roll_from_two_groups_to_four_stops_and_starts_pairs_never_emptying_a_role():
    """The layout change of issue 34: `count: 2` per role rewritten as four groups."""
    two, four = moriio_pairs(1, count=2), moriio_pairs(2)
    work = found(two, four)
    assert {c.name: c.action.value for c in work} == {
        "proxy": "keep",
        "prefill-0-0": "start",
        "decode-0-0": "start",
        "prefill-1-0": "start",
        "decode-1-0": "start",
        "prefill-0": "stop",
        "prefill-1": "stop",
        "decode-0": "stop",
        "decode-1": "stop",
    }
    assert strategies.default(work, MORIIO) == "roll"
    steps = strategies.plan("roll", work, four, MORIIO)
    assert described(steps) == [
        "drain prefill-0, decode-0",
        "wait_idle prefill-0, decode-0",
        "apply prefill-0, prefill-0-0, decode-0, decode-0-0",
        "wait_ready prefill-0-0, decode-0-0 [read]",
        "wait_gone prefill-0, decode-0",
        "drain prefill-1, decode-1",
        "wait_idle prefill-1, decode-1",
        "apply prefill-1, prefill-1-0, decode-1, decode-1-0",
        "wait_ready prefill-1-0, decode-1-0 [read]",
        "wait_gone prefill-1, decode-1",
    ]
    roles = {c.name: c.role for c in work if c.role != "proxy"}
    serving_throughout({"prefill-0", "prefill-1", "decode-0", "decode-1"}, steps, roles)


def test_a_resumed_roll_waits_for_the_instances_still_starting_before_draining_any():
    """Issue 34's story: `pdctl serve` killed while the first pair of the four-group layout
    was starting. The next plane finds prefill-0-0 and decode-0-0 at the desired launch but
    not ready, and prefill-1/decode-1 the only ones serving: draining those first emptied
    the prefill role (503 "no available prefill instance" under load)."""
    two, four = moriio_pairs(1, count=2), moriio_pairs(2)
    ports_two = allocate(two)
    ports_four = kept_ports(two, ports_two, four)
    old = {launch.name: launch for launch in render(two, ports_two, SETTINGS)}
    new = {launch.name: launch for launch in render(four, ports_four, SETTINGS)}
    running = {
        "proxy": Running(new["proxy"], "RUNNING", True, 2),
        "prefill-0-0": Running(new["prefill-0-0"], "STARTING", None, 2),
        "decode-0-0": Running(new["decode-0-0"], "STARTING", None, 2),
        "prefill-1": Running(old["prefill-1"], "RUNNING", True, 1),
        "decode-1": Running(old["decode-1"], "RUNNING", True, 1),
    }
    work = changes(running, list(new.values()))
    assert {c.name for c in work if c.starting} == {"prefill-0-0", "decode-0-0"}
    for strategy in ("roll", "hold", "recreate"):
        steps = strategies.plan(strategy, work, four, MORIIO)
        assert described(steps)[0] == "wait_ready prefill-0-0, decode-0-0 [read]", strategy
    steps = strategies.plan("roll", work, four, MORIIO)
    roles = {c.name: c.role for c in work if c.role != "proxy"}
    serving_throughout({"prefill-1", "decode-1"}, steps, roles)


def test_roll_restarts_the_instance_a_role_has_beyond_the_pairs_on_its_own():
    spec = moriio_pairs(1, count=2)
    groups = [g.model_copy(update={"count": 3}) if g.name == "decode" else g for g in spec.groups]
    three = spec.model_copy(update={"groups": groups})
    target = three.model_copy(
        update={"groups": [g.model_copy(update={"mode": Mode.WRITE}) for g in groups]}
    )
    steps = strategies.plan("roll", found(three, target), target, MORIIO)
    applies = [s.instances for s in steps if s.kind is K.APPLY]
    assert applies == [("prefill-0", "decode-0"), ("prefill-1", "decode-1"), ("decode-2",)]


def test_roll_that_only_adds_instances_drains_nothing():
    steps = strategies.plan("roll", found(nixl(1), nixl(2)), nixl(2), NIXL)
    assert K.DRAIN not in {s.kind for s in steps} and K.WAIT_IDLE not in {s.kind for s in steps}
    assert described(steps) == [
        "apply prefill-1, decode-1",
        "add prefill-1, decode-1",
        "wait_ready prefill-1, decode-1",
        "keep_proxy proxy",
    ]


# -- hold and recreate -------------------------------------------------------------------------


def test_hold_pauses_both_modes_converges_everything_then_resumes_both():
    spec, target = moriio_pairs(1), moriio_pairs(1, "write")
    steps = strategies.plan("hold", found(spec, target), target, MORIIO)
    assert described(steps) == [
        "hold_begin",
        "pause read",
        "pause write",
        "wait_idle prefill-0, decode-0",
        "apply prefill-0, decode-0",
        "wait_ready prefill-0, decode-0 [write]",
        "hold_end",
        "resume read",
        "resume write",
    ]


def test_hold_with_nothing_to_change_does_nothing():
    spec = moriio_pairs(1)
    assert strategies.plan("hold", found(spec, spec), spec, MORIIO) == []


def test_recreate_converges_everything_at_once_without_drain_or_hold():
    spec, target = moriio_pairs(1, count=2), moriio_pairs(1, "write", count=2)
    steps = strategies.plan("recreate", found(spec, target), target, MORIIO)
    assert described(steps) == [
        "apply prefill-0, prefill-1, decode-0, decode-1",
        "wait_ready prefill-0, prefill-1, decode-0, decode-1 [write]",
    ]


def test_a_restart_asked_restarts_processes_as_they_are():
    spec = nixl(2)
    work = forced(found(spec, spec), {"decode-1"})
    steps = strategies.plan("recreate", work, spec, NIXL)
    # NIXL: the proxy is told of it again (adding is idempotent; a rollback relies on it).
    assert described(steps) == ["restart decode-1", "add decode-1", "wait_ready decode-1"]


# -- instances the proxy lists (NIXL) and the proxy itself -----------------------------------


def test_nixl_layout_change_tells_the_proxy_who_comes_and_goes_and_keeps_it_running():
    two = nixl(2)
    renamed = tiny_pair(
        "nixl",
        groups=[
            {"name": "p", "role": "prefill", "count": 2},
            {"name": "d", "role": "decode", "count": 2},
        ],
    )
    work = found(two, renamed)
    proxy = next(c for c in work if c.role == "proxy")
    assert (proxy.action, proxy.why) == (Action.KEEP, "the instances it lists")
    steps = strategies.plan("roll", work, renamed, NIXL)
    assert described(steps)[:6] == [
        "drain prefill-0, decode-0",
        "wait_idle prefill-0, decode-0",
        "apply prefill-0, p-0, decode-0, d-0",
        "forget prefill-0, decode-0",
        "add p-0, d-0",
        "wait_ready p-0, d-0",
    ]
    assert steps[-1] == Step(K.KEEP_PROXY, ("proxy",), spec=renamed)
    assert K.RESTART not in {s.kind for s in steps}


def test_moriio_instances_register_themselves_no_add_or_forget():
    two, four = moriio_pairs(1, count=2), moriio_pairs(2)
    work = found(two, four)
    kinds = {s.kind for s in strategies.plan("hold", work, four, MORIIO)}
    assert K.ADD not in kinds and K.FORGET not in kinds and K.KEEP_PROXY not in kinds


def test_a_change_to_the_proxy_s_own_settings_can_only_recreate():
    spec = nixl(2)
    target = with_decode_seqs(spec, 8).model_copy(
        update={"proxy": spec.proxy.model_copy(update={"policy": "least-tokens"})}
    )
    work = found(spec, target)
    can = strategies.allowed(work, NIXL)
    assert "only recreate" in (can["roll"] or "") and "only recreate" in (can["hold"] or "")
    assert strategies.default(work, NIXL) == "recreate"
    with pytest.raises(RolloutRejected, match="the proxy restarts"):
        strategies.plan("roll", work, target, NIXL)
    steps = strategies.plan("recreate", work, target, NIXL)
    # One apply: the new proxy lists its instances by flag (nothing added through its API).
    assert described(steps) == [
        "apply proxy, decode-0, decode-1",
        "wait_ready proxy",
        "wait_ready decode-0, decode-1",
    ]
    assert steps[0].spec is target


def test_a_proxy_restart_asked_is_a_restart_not_an_apply():
    spec = nixl(2)
    work = forced(found(spec, spec), {"proxy"})
    assert described(strategies.plan("hold", work, spec, NIXL)) == [
        "restart proxy",
        "wait_ready proxy",
    ]


def test_a_start_waits_for_every_instance_in_its_mode_s_group():
    spec = moriio_pairs(1, "write", count=2)
    assert described(start_ready(spec, registers=True)) == [
        "wait_ready prefill-0, prefill-1, decode-0, decode-1 [write]"
    ]
    assert described(start_ready(nixl(1), registers=False)) == ["wait_ready prefill-0, decode-0"]


def test_every_change_kind_is_a_change():
    assert Change("x", Action.START, "decode").arrives
    assert not Change("x", Action.KEEP, "decode").leaves
