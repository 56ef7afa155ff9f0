"""The checks that need the world: other deployments' ports, busy host ports, the stand-in's
profiles, and env names that change what code runs."""

from __future__ import annotations

import socket

import pytest

from controller.validation import Problem, host_port_busy, validate
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d, spec


def run(
    body: dict,
    others: dict | None = None,
    busy: set[int] = frozenset(),
    allow_code_env: bool = False,
    own: set[int] = frozenset(),
) -> list[Problem]:
    return validate(
        spec(body),
        claimed_by_others=others or {},
        is_busy=busy.__contains__,
        allow_code_env=allow_code_env,
        own_ports=own,
    )


def with_http(body: dict, port: int) -> dict:
    return edited(body, ("groups", 0, "ports"), [{"http": port}])


def test_a_sound_spec_has_no_problems() -> None:
    assert run(nixl_1p1d()) == []


def test_check_rules_come_first_and_alone() -> None:
    assert run(nixl_1p1d(connector=None, env={"LD_PRELOAD": "x"})) == [
        Problem(("connector",), "a disaggregated deployment needs a KV connector")
    ]


def test_a_port_claimed_by_another_deployment_names_it() -> None:
    [problem] = run(with_http(colocated(), 21000), others={21000: "other"})
    assert problem == Problem(
        ("groups", 0, "ports", 0, "http"),
        "port 21000 (HTTP) is claimed by deployment 'other'",
        "port_conflict",
    )


def test_a_rank_offset_inside_another_deployment_is_a_conflict() -> None:
    body = edited(moriio_1p1d(tp=4), ("groups", 1, "ports"), [{"handshake": 21000}])
    [problem] = run(body, others={21003: "other"})
    assert problem.loc == ("groups", 1, "ports", 0, "handshake")
    assert problem.msg == (
        "port 21003 (handshake (ranks use 21000-21003)) is claimed by deployment 'other'"
    )


def test_a_given_port_busy_on_the_host_is_refused() -> None:
    [problem] = run(nixl_1p1d(proxy={"port": 21000}), busy={21000})
    assert problem == Problem(
        ("proxy", "port"), "port 21000 (the proxy's HTTP port) is in use on this host", "port_busy"
    )


def test_a_port_held_by_the_deployment_itself_is_not_busy() -> None:
    assert run(nixl_1p1d(proxy={"port": 21000}), busy={21000}, own={21000}) == []


@pytest.mark.parametrize(
    ("over", "loc", "phrase"),
    [
        ({"model": "gpt-5"}, ("model",), "no model profile 'gpt-5'; known (name or hf_id)"),
        ({"hardware": "tpu-v9"}, ("hardware",), "no hardware profile 'tpu-v9'; known: b200"),
    ],
)
def test_unknown_stand_in_profiles_are_refused(over: dict, loc: tuple, phrase: str) -> None:
    [problem] = run(nixl_1p1d(**over))
    assert (problem.loc, problem.type) == (loc, "unknown_profile")
    assert phrase in problem.msg


@pytest.mark.parametrize("model", ["llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"])
def test_a_stand_in_model_is_a_profile_name_or_its_hf_id(model: str) -> None:
    assert run(nixl_1p1d(model=model, hardware="h100")) == []


def test_real_vllm_takes_any_model() -> None:
    assert run(nixl_1p1d(engine="vllm", model="org/anything")) == []


def test_code_env_is_refused_at_each_place_unless_allowed() -> None:
    body = edited(
        nixl_1p1d(env={"PYTHONPATH": "/x"}), ("groups", 1, "env"), {"LD_PRELOAD": "/y.so"}
    )
    problems = run(body)
    assert [(p.loc, p.type) for p in problems] == [
        (("env", "PYTHONPATH"), "code_env"),
        (("groups", 1, "env", "LD_PRELOAD"), "code_env"),
    ]
    assert "allow_code_env" in problems[0].msg
    assert run(body, allow_code_env=True) == []


def test_every_world_problem_is_reported_at_once() -> None:
    body = with_http(moriio_1p1d(model="nope", env={"LD_AUDIT": "x"}), 21000)
    assert {p.type for p in run(body, busy={21000})} == {"port_busy", "unknown_profile", "code_env"}


def test_host_port_busy_sees_a_listening_socket() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert host_port_busy(port)
    assert not host_port_busy(port)
