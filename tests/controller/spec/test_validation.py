"""The checks that need the world: other deployments' ports, busy host ports, the stand-in's
profiles, and the engine allowlists with the operator's audited overrides."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from controller.spec.validation import Problem, host_port_busy, validate
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


def test_env_outside_the_allowlist_is_refused_at_each_place() -> None:
    body = edited(
        nixl_1p1d(env={"PYTHONWARNINGS": "ignore::antigravity.X", "VLLM_LOGGING_LEVEL": "INFO"}),
        ("groups", 0, "env"),
        {"BROWSER": "/tmp/x.sh", "VLLM_LOGGING_CONFIG_PATH": "/tmp/log.json"},
    )
    problems = run(body)
    assert [(p.loc, p.type) for p in problems] == [
        (("env", "PYTHONWARNINGS"), "env_not_allowed"),
        (("groups", 0, "env", "BROWSER"), "env_not_allowed"),
        (("groups", 0, "env", "VLLM_LOGGING_CONFIG_PATH"), "env_not_allowed"),
    ]
    assert "surface/env.txt" in problems[1].msg and "unsafe_allow.env" in problems[1].msg


def test_args_outside_the_allowlist_are_refused_at_the_token() -> None:
    body = edited(
        nixl_1p1d(engine="vllm", extra_args=["--dtype", "bfloat16", "--trust-remote-code"]),
        ("groups", 1, "extra_args"),
        ["--foo", "--middleware=evil.App"],
    )
    problems = run(body)
    assert [(p.loc, p.type) for p in problems] == [
        (("extra_args", 2), "arg_not_allowed"),
        (("groups", 1, "extra_args", 0), "arg_not_allowed"),
        (("groups", 1, "extra_args", 1), "arg_not_allowed"),
    ]
    assert "unsafe_allow.args" in problems[0].msg
    assert "unsafe_allow" not in problems[1].msg  # an unknown flag has no override


def test_the_host_setting_alone_lets_nothing_through() -> None:
    body = nixl_1p1d(engine="vllm", env={"LD_PRELOAD": "/y.so"}, extra_args=["--config=x.yaml"])
    assert [p.type for p in run(body, allow_code_env=True)] == [
        "env_not_allowed",
        "arg_not_allowed",
    ]


OVERRIDE = {"env": ["LD_PRELOAD"], "args": ["--trust-remote-code"], "reason": "vendor kernel lib"}


def test_an_override_lets_exactly_what_it_names_through_when_the_host_allows_it() -> None:
    body = nixl_1p1d(
        engine="vllm",
        env={"LD_PRELOAD": "/opt/lib.so", "BROWSER": "x"},
        extra_args=["--trust-remote-code", "--middleware=m.App"],
        unsafe_allow=OVERRIDE,
    )
    assert [p.loc for p in run(body, allow_code_env=True)] == [
        ("env", "BROWSER"),
        ("extra_args", 1),
    ]
    off = run(body)
    assert off[0] == Problem(
        ("unsafe_allow",),
        "this host takes no overrides of the engine allowlists: its operator setting "
        "allow_code_env is off (PDCTL_ALLOW_CODE_ENV)",
        "unsafe_allow_off",
    )
    assert [p.loc for p in off[1:]] == [
        ("env", "LD_PRELOAD"),
        ("env", "BROWSER"),
        ("extra_args", 0),
        ("extra_args", 1),
    ]


def test_an_override_names_only_what_the_spec_uses() -> None:
    unused = {"env": ["LD_PRELOAD"], "args": ["--trust-remote-code", "--nope"], "reason": "x" * 10}
    problems = run(nixl_1p1d(engine="vllm", unsafe_allow=unused), allow_code_env=True)
    assert [(p.loc, p.type) for p in problems] == [
        (("unsafe_allow", "env", 0), "unsafe_allow_unused"),
        (("unsafe_allow", "args", 0), "unsafe_allow_unused"),
        (("unsafe_allow", "args", 1), "unsafe_allow_unused"),
    ]


def test_an_override_cannot_free_a_flag_pdctl_renders() -> None:
    body = nixl_1p1d(
        engine="vllm",
        extra_args=["--host=0.0.0.0"],
        unsafe_allow={"args": ["--host"], "reason": "bind every interface"},
    )
    [problem] = run(body, allow_code_env=True)
    assert problem.loc == ("extra_args", 0) and "--host is set by pdctl" in problem.msg


def test_an_override_needs_a_reason() -> None:
    with pytest.raises(ValidationError) as err:
        spec(nixl_1p1d(unsafe_allow={"env": ["LD_PRELOAD"]}))
    assert err.value.errors()[0]["loc"] == ("unsafe_allow", "reason")


@pytest.mark.parametrize("connector", ["NixlConnector", "ExampleConnector"])
def test_the_readme_real_vllm_specs_pass(connector: str) -> None:
    body = nixl_1p1d(
        engine="vllm",
        model="/root/.cache/pdctl/tiny-llama",
        connector=connector,
        max_model_len=2048,
        extra_args=["--dtype", "bfloat16"],
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1"},
    )
    body = edited(body, ("groups", 0, "env"), {"VLLM_CPU_OMP_THREADS_BIND": "0"})
    body = edited(body, ("groups", 1, "env"), {"VLLM_CPU_OMP_THREADS_BIND": "1"})
    assert run(body) == []


def test_the_blog_and_stand_in_specs_pass() -> None:
    from tests.controller.factories import mori_blog, tiny_pair

    assert run(mori_blog().model_dump(mode="json")) == []
    assert run(tiny_pair(extra_args=["--seed", "7"]).model_dump(mode="json")) == []


def test_every_world_problem_is_reported_at_once() -> None:
    body = with_http(moriio_1p1d(model="nope", env={"LD_AUDIT": "x"}), 21000)
    assert {p.type for p in run(body, busy={21000})} == {
        "port_busy",
        "unknown_profile",
        "env_not_allowed",
    }


def test_host_port_busy_sees_a_listening_socket() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert host_port_busy(port)
    assert not host_port_busy(port)
