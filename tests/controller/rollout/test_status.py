"""Each process's truth against the desired revision (controller/rollout/status.py): pure."""

from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, render
from controller.rollout.status import applied, instance_truth
from controller.spec.deployment import DeploymentSpec
from tests.controller.factories import kept_ports, moriio_pairs, tiny_pair

SETTINGS = LaunchSettings(pdctl_command=("pdctl",))


def rows(spec: DeploymentSpec, revision: int = 1, **states: str) -> dict:
    """Supervisor.running's rows: every process RUNNING and healthy at `revision`."""
    return {
        launch.name: (launch, states.get(launch.name.replace("-", "_"), "RUNNING"), True, revision)
        for launch in render(spec, allocate(spec), SETTINGS)
    }


def desired(spec: DeploymentSpec, after: DeploymentSpec | None = None):
    ports = kept_ports(after, allocate(after), spec) if after else allocate(spec)
    return render(spec, ports, SETTINGS)


def by_name(truth: list[dict]) -> dict[str, dict]:
    return {t["name"]: t for t in truth}


def nixl(count: int) -> DeploymentSpec:
    groups = [
        {"name": "prefill", "role": "prefill", "count": count},
        {"name": "decode", "role": "decode", "count": count},
    ]
    return tiny_pair("nixl", groups=groups)


def test_what_runs_the_desired_revision_ready_is_applied():
    spec = moriio_pairs(1)
    truth = instance_truth(rows(spec, revision=3), desired(spec), 3)
    assert by_name(truth)["decode-0"] == {
        "name": "decode-0",
        "role": "decode",
        "state": "RUNNING",
        "revision": 3,
        "desired_revision": 3,
        "drifted": False,
        "action": "keep",
        "why": None,
    }
    assert applied(truth)


def test_an_unchanged_process_from_an_earlier_revision_has_not_drifted():
    spec = moriio_pairs(1)
    truth = by_name(instance_truth(rows(spec, revision=1), desired(spec), 2))
    assert truth["prefill-0"]["revision"] == 1 and truth["prefill-0"]["desired_revision"] == 2
    assert not truth["prefill-0"]["drifted"]


def test_a_process_running_another_launch_has_drifted_and_says_why():
    truth = instance_truth(rows(moriio_pairs(1)), desired(moriio_pairs(1, "write")), 2)
    prefill = by_name(truth)["prefill-0"]
    assert prefill["drifted"] and prefill["action"] == "restart"
    assert prefill["why"].startswith("command line: --kv-transfer-config")
    assert not applied(truth)


def test_a_process_not_started_yet_and_one_dropped_are_both_drift():
    three = moriio_pairs(1, count=3)
    two = moriio_pairs(1, count=2)
    grown = by_name(instance_truth(rows(two), desired(three, after=two), 2))
    assert grown["decode-2"] == {
        "name": "decode-2",
        "role": "decode",
        "state": "NOT STARTED",
        "revision": None,
        "desired_revision": 2,
        "drifted": True,
        "action": "start",
        "why": "new",
    }
    shrunk = instance_truth(rows(three), desired(two, after=three), 2)
    dropped = by_name(shrunk)["prefill-2"]
    assert dropped["desired_revision"] is None and dropped["action"] == "stop"
    assert dropped["drifted"] and dropped["revision"] == 1
    assert not applied(shrunk)


def test_a_proxy_to_be_told_new_instances_is_kept_but_drifted():
    truth = by_name(instance_truth(rows(nixl(1)), desired(nixl(2), after=nixl(1)), 2))
    assert truth["proxy"]["action"] == "keep" and truth["proxy"]["drifted"]
    assert truth["proxy"]["why"] == "the instances it lists"


def test_a_process_still_starting_is_not_drifted_but_not_applied_either():
    spec = moriio_pairs(1)
    truth = instance_truth(rows(spec, decode_0="STARTING"), desired(spec), 1)
    assert not by_name(truth)["decode-0"]["drifted"]
    assert not applied(truth)


def test_a_failed_process_has_drifted():
    spec = moriio_pairs(1)
    truth = by_name(instance_truth(rows(spec, decode_0="FATAL"), desired(spec), 1))
    assert truth["decode-0"]["drifted"] and truth["decode-0"]["why"] == "not running (FATAL)"
