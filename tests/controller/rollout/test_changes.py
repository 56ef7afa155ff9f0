"""What a rollout must do to each process, and why (controller/rollout/changes.py): pure."""

from dataclasses import replace

import pytest

from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, render
from controller.rollout.changes import Action, Change, Running, changes, forced
from controller.spec.deployment import DeploymentSpec
from tests.controller.factories import kept_ports, moriio_pairs, tiny_pair

SETTINGS = LaunchSettings(pdctl_command=("pdctl",))


def launches(spec: DeploymentSpec, after: DeploymentSpec | None = None):
    """`spec`'s launches; `after`: as a revision following `after` (kept ports kept)."""
    ports = kept_ports(after, allocate(after), spec) if after else allocate(spec)
    return render(spec, ports, SETTINGS)


def running(spec: DeploymentSpec, **states: tuple[str, bool | None]) -> dict[str, Running]:
    """Every process of `spec` RUNNING and healthy at revision 1, but for `states`."""
    out = {}
    for launch in launches(spec):
        state, healthy = states.get(launch.name.replace("-", "_"), ("RUNNING", True))
        out[launch.name] = Running(launch, state, healthy, 1)
    return out


def by_name(found: list[Change]) -> dict[str, tuple[str, str]]:
    return {c.name: (c.action.value, c.why) for c in found}


def nixl(count: int = 1, **changes_: object) -> DeploymentSpec:
    """NIXL stand-ins (the proxy lists every instance by flag), `count` per role."""
    groups = [
        {"name": "prefill", "role": "prefill", "count": count},
        {"name": "decode", "role": "decode", "count": count},
    ]
    return tiny_pair("nixl", groups=groups, **changes_)


def test_nothing_differs_nothing_changes():
    spec = moriio_pairs(1, count=2)
    found = changes(running(spec), launches(spec))
    assert [c.name for c in found] == ["proxy", "prefill-0", "prefill-1", "decode-0", "decode-1"]
    assert {c.action for c in found} == {Action.KEEP} and {c.why for c in found} == {""}


def test_a_changed_command_line_restarts_the_instances_that_run_it_naming_the_flag():
    spec = moriio_pairs(1, count=2)
    groups = [
        g.model_copy(update={"max_num_seqs": 8}) if g.name == "decode" else g for g in spec.groups
    ]
    found = by_name(changes(running(spec), launches(spec.model_copy(update={"groups": groups}))))
    assert found["decode-0"] == ("restart", "command line: --max-num-seqs")
    assert found["decode-1"][0] == "restart"
    assert found["prefill-0"] == ("keep", "") and found["proxy"] == ("keep", "")


def test_a_mode_change_restarts_and_says_the_mode_it_runs_in():
    spec = moriio_pairs(1)
    found = changes(running(spec), launches(moriio_pairs(1, "write")))
    prefill = next(c for c in found if c.name == "prefill-0")
    assert prefill.action is Action.RESTART and prefill.mode == "write"
    assert prefill.why.startswith("command line: --kv-transfer-config")


def test_a_changed_environment_restarts_naming_the_variables():
    spec = nixl()
    wanted = launches(tiny_pair("nixl", groups=_groups(spec), env={"HF_HOME": "/x"}))
    found = by_name(changes(running(spec), wanted))
    assert found["prefill-0"] == ("restart", "environment: HF_HOME")
    assert found["decode-0"] == ("restart", "environment: HF_HOME")


def test_another_node_restarts_naming_both_nodes():
    spec = nixl()
    now = running(spec)
    wanted = [
        replace(launch, address="10.0.0.2") if launch.name == "decode-0" else launch
        for launch in launches(spec)
    ]
    assert by_name(changes(now, wanted))["decode-0"] == ("restart", "node this host -> 10.0.0.2")


@pytest.mark.parametrize(
    ("state", "healthy", "action", "why"),
    [
        ("RUNNING", False, "restart", "not healthy"),
        ("FATAL", None, "restart", "not running (FATAL)"),
        ("EXITED", None, "restart", "not running (EXITED)"),
        ("BACKOFF", None, "restart", "not running (BACKOFF)"),
        ("STARTING", False, "keep", ""),  # not ready yet is not unwell
        ("RUNNING", None, "keep", ""),  # not probed yet
    ],
)
def test_an_unchanged_process_that_is_not_serving_restarts(state, healthy, action, why):
    spec = nixl()
    found = by_name(changes(running(spec, decode_0=(state, healthy)), launches(spec)))
    assert found["decode-0"] == (action, why)
    assert found["prefill-0"] == ("keep", "")


def test_new_instances_start_and_dropped_ones_stop_listed_after_the_desired_ones():
    two = moriio_pairs(1, count=2)
    three = moriio_pairs(1, count=3)
    grow = changes(running(two), launches(three, after=two))
    assert {c.name for c in grow if c.action is Action.KEEP} == {c.name for c in grow} - {
        "prefill-2",
        "decode-2",
    }
    assert [(c.name, c.action.value, c.why) for c in grow if c.action is Action.START] == [
        ("prefill-2", "start", "new"),
        ("decode-2", "start", "new"),
    ]
    shrink = changes(running(three), launches(two, after=three))
    assert {c.action for c in shrink[:-2]} == {Action.KEEP}
    assert [c.name for c in shrink][-2:] == ["prefill-2", "decode-2"]
    stopped = shrink[-1]
    assert stopped.action is Action.STOP and stopped.why == "not in the desired revision"
    assert stopped.role == "decode" and stopped.url == running(three)["decode-2"].launch.url
    assert stopped.leaves and not stopped.arrives


def test_a_proxy_whose_instance_list_alone_changed_is_kept_and_says_why():
    found = by_name(changes(running(nixl(1)), launches(nixl(2), after=nixl(1))))
    assert found["proxy"] == ("keep", "the instances it lists")
    assert found["prefill-0"] == found["decode-0"] == ("keep", "")
    assert found["prefill-1"] == ("start", "new")


def test_a_proxy_whose_own_settings_changed_restarts():
    spec = nixl()
    wanted = tiny_pair("nixl", groups=_groups(spec), proxy={"policy": "least-tokens"})
    found = by_name(changes(running(spec), launches(wanted)))
    assert found["proxy"] == ("restart", "command line: --policy")
    assert found["prefill-0"] == ("keep", "")


def test_a_proxy_on_another_node_restarts_even_if_its_list_changed_too():
    """A node is the proxy's own setting: telling it the instances it lists does not move it."""
    now = running(nixl(1))
    wanted = [
        replace(launch, address="10.0.0.2") if launch.is_proxy else launch
        for launch in launches(nixl(2), after=nixl(1))
    ]
    assert by_name(changes(now, wanted))["proxy"] == ("restart", "node this host -> 10.0.0.2")


def test_an_unwell_proxy_restarts_even_if_only_its_list_changed():
    now = running(nixl(1), proxy=("FATAL", None))
    found = by_name(changes(now, launches(nixl(2), after=nixl(1))))
    assert found["proxy"][0] == "restart"


def test_restart_asked_with_nothing_changed_restarts_every_instance_but_the_proxy():
    spec = moriio_pairs(1, count=2)
    found = forced(changes(running(spec), launches(spec)), None)
    restarted = [c.name for c in found if c.action is Action.RESTART]
    assert restarted == ["prefill-0", "prefill-1", "decode-0", "decode-1"]
    assert all(c.forced and c.why == "restart asked" for c in found if c.role != "proxy")
    assert found[0].action is Action.KEEP and not found[0].forced


def test_restart_asked_when_something_drifted_restarts_only_what_drifted():
    spec = moriio_pairs(1, count=2)
    found = forced(changes(running(spec, decode_1=("FATAL", None)), launches(spec)), None)
    assert by_name(found)["decode-1"] == ("restart", "not running (FATAL)")
    assert [c.name for c in found if c.action is Action.RESTART] == ["decode-1"]
    assert not any(c.forced for c in found)


def test_restart_of_named_processes_restarts_them_the_proxy_included():
    spec = moriio_pairs(1, count=2)
    found = forced(changes(running(spec), launches(spec)), {"decode-0", "proxy"})
    assert {c.name for c in found if c.forced} == {"decode-0", "proxy"}
    assert {c.name for c in found if c.action is Action.RESTART} == {"decode-0", "proxy"}


def test_a_named_process_that_changed_anyway_is_converged_not_forced():
    spec = nixl()
    found = changes(running(spec, decode_0=("FATAL", None)), launches(spec))
    decode = next(c for c in forced(found, {"decode-0"}) if c.name == "decode-0")
    assert decode.action is Action.RESTART and not decode.forced
    assert decode.why == "not running (FATAL)"


def _groups(spec: DeploymentSpec) -> list[dict]:
    return [g.model_dump(mode="json") for g in spec.groups]
