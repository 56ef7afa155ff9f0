"""Runtime role switching in the spec and a move's input checks (pure): which instance serves
which role, what the engines and the proxy are launched with, and every refusal naming its
field. tests/e2e/rollout/test_role_move.py moves one for real."""

import json

import pytest
from pydantic import ValidationError

from controller.launch.ports import allocate
from controller.launch.render import LaunchSettings, proxy_args, render
from controller.spec.deployment import DeploymentSpec
from controller.spec.field_error import FieldError
from controller.spec.rules import check
from controller.spec.sections.role_switch import instance_roles
from controller.switch.role_move import plan_move
from domain.errors import ConfigError
from tests.controller.factories import tiny_pair


def flip(**changes) -> DeploymentSpec:
    spec = tiny_pair("flip", **{"role_switch": {}, **changes})
    groups = [g.model_copy(update={"count": 2}) if g.role == "decode" else g for g in spec.groups]
    return spec.model_copy(update={"groups": groups})


def refusal(spec, instance, role) -> tuple[list, str]:
    with pytest.raises(ConfigError) as caught:
        plan_move(spec, instance, role)
    detail = caught.value.detail()[0]
    return detail["loc"], detail["msg"]


def test_a_move_writes_the_instance_into_serving_and_back_out():
    spec = flip()
    move = plan_move(spec, "decode-1", "prefill")
    assert (move.source, move.target) == ("decode", "prefill")
    assert move.spec.role_switch.serving == {"decode-1": "prefill"}
    assert instance_roles(move.spec) == {
        "prefill-0": "prefill",
        "decode-0": "decode",
        "decode-1": "prefill",
    }
    back = plan_move(move.spec, "decode-1", "decode")
    assert back.spec.role_switch.serving == {}
    assert spec.role_switch.serving == {}  # the current spec is left as it is


def test_engines_start_kv_both_with_their_serving_role_and_the_proxy_routes_by_it():
    spec = plan_move(flip(), "decode-1", "prefill").spec
    ports = allocate(spec)
    launches = {launch.name: launch for launch in render(spec, ports, LaunchSettings())}
    config = json.loads(
        launches["decode-1"].argv[launches["decode-1"].argv.index("--kv-transfer-config") + 1]
    )
    assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "pd_role": "prefill"}
    assert launches["decode-1"].role == "prefill"
    args = proxy_args(spec, ports, LaunchSettings())
    decode_1 = f"http://127.0.0.1:{ports.instances['decode-1'].http}"
    assert args[args.index(decode_1) - 1] == "--prefill"
    plain = render(tiny_pair("plain"), allocate(tiny_pair("plain")), LaunchSettings())
    assert not any("pd_role" in arg for launch in plain for arg in launch.argv)


@pytest.mark.parametrize(
    ("instance", "role", "loc", "words"),
    [
        ("decode-9", "prefill", ["body", "instance"], "no instance 'decode-9'"),
        ("decod-0", "prefill", ["body", "instance"], "(did you mean 'decode-0'?)"),
        ("decode-0", "decode", ["body", "role"], "already serves decode"),
        ("prefill-0", "decode", ["body", "instance"], "last prefill instance"),
        ("decode-0", "colocated", ["body", "role"], "prefill or decode"),
    ],
)
def test_a_move_that_cannot_be_made_names_its_field(instance, role, loc, words):
    got_loc, msg = refusal(flip(), instance, role)
    assert got_loc == loc and words in msg


def test_a_move_needs_a_role_switching_nixl_deployment():
    loc, msg = refusal(tiny_pair("plain"), "decode-0", "prefill")
    assert loc == ["body", "instance"] and "role_switch" in msg
    loc, msg = refusal(tiny_pair("mori", connector="MoRIIOConnector"), "decode-0", "prefill")
    assert loc == ["body", "instance"] and "NixlConnector" in msg


def test_a_spec_asks_for_role_switching_only_where_it_can_run():
    with pytest.raises(FieldError, match="NixlConnector") as caught:
        check(tiny_pair("mori", connector="MoRIIOConnector", role_switch={}))
    assert caught.value.loc == ("role_switch",)
    with pytest.raises(FieldError, match="no instance named") as caught:
        check(flip(role_switch={"serving": {"decode-7": "prefill"}}))
    assert caught.value.loc == ("role_switch", "serving", "decode-7")
    with pytest.raises(FieldError, match="no instance would serve decode"):
        check(tiny_pair("one", role_switch={"serving": {"decode-0": "prefill"}}))
    with pytest.raises(FieldError, match="serves prefill or decode"):
        check(tiny_pair("one", role_switch={"serving": {"decode-0": "colocated"}}))
    with pytest.raises(ValidationError):
        tiny_pair("one", role_switch={"serving": {"decode-0": "prefill"}, "other": 1})
