"""Hostile input to the control plane's API: every bad body, name or engine arg is a 4xx that
says what is wrong (naming the field where there is one), and nothing reaches a shell."""

from __future__ import annotations

import json
import shlex

import pytest
from fastapi.testclient import TestClient

from tests.specs import edited, nixl_1p1d
from tests.web.conftest import MakeClient


@pytest.fixture(scope="module")
def api(make_module_client: MakeClient) -> TestClient:
    return make_module_client()


def post_raw(api: TestClient, body: bytes, content_type: str | None = "application/json"):
    headers = {"Content-Type": content_type} if content_type else {}
    return api.post("/api/deployments", content=body, headers=headers)


@pytest.mark.parametrize("body", [b"{", b'{"name": "pd",', b"\xff\xfe", b"{'name': 'pd'}"])
def test_malformed_json_is_422_json_invalid(api: TestClient, body: bytes) -> None:
    response = post_raw(api, body)
    assert response.status_code == 422
    [item, *_] = response.json()["detail"]
    assert item["loc"][0] == "body" and item["type"] == "json_invalid"


@pytest.mark.parametrize("field", ["name", "time_scale", "max_model_len"])
@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_422_not_500(api: TestClient, field: str, value: bytes) -> None:
    # Python's json reads them; echoing them back in the 422 is what used to fail.
    body = json.dumps(nixl_1p1d(**{field: 0})).replace(f'"{field}": 0', f'"{field}": X')
    response = post_raw(api, body.encode().replace(b"X", value))
    assert response.status_code == 422
    assert ["body", field] in [item["loc"] for item in response.json()["detail"]]


def test_a_422_does_not_echo_what_was_sent(api: TestClient) -> None:
    secret = "hunter2-" + "x" * 5000
    response = api.post("/api/deployments", json=nixl_1p1d(env={"HF_TOKEN": secret}))
    assert response.status_code == 422
    assert "hunter2" not in response.text and len(response.text) < 1000


@pytest.mark.parametrize("body", [b"[]", b'"pd"', b"null", b"42"])
def test_a_body_that_is_not_an_object_is_422_at_body(api: TestClient, body: bytes) -> None:
    response = post_raw(api, body)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]


def test_deeply_nested_json_is_a_4xx_not_a_crash(api: TestClient) -> None:
    response = post_raw(api, b"[" * 50_000 + b"]" * 50_000)
    assert 400 <= response.status_code < 500
    assert api.get("/health").status_code == 200


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_a_body_that_is_not_json_is_415_saying_so(
    api: TestClient, content_type: str | None
) -> None:
    response = post_raw(api, json.dumps(nixl_1p1d()).encode(), content_type)
    assert response.status_code == 415
    assert "must be JSON" in response.json()["detail"]


def test_a_json_body_with_a_charset_is_accepted(api: TestClient) -> None:
    response = post_raw(
        api, json.dumps(nixl_1p1d("charset")).encode(), "application/json; charset=utf-8"
    )
    assert response.status_code == 201
    assert api.delete("/api/deployments/charset").status_code == 204


def test_an_empty_post_needs_no_content_type(api: TestClient) -> None:
    # curl -X POST .../start sends no body and no Content-Type: not a 415.
    response = api.post("/api/deployments/nothing/start")
    assert response.status_code == 404


NAMES = {
    "dot-dot-slash": "../etc",
    "encoded dots": "%2e%2e",
    "NUL": "pd\x00x",
    "RTL mark": "pd\u202edc",
    "10k chars": "p" * 10_000,
    "upper": "PD",
    "space": "p d",
    "newline": "pd\n",
    "emoji": "pd-🙂",
    "empty": "",
}


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_a_hostile_deployment_name_is_422_at_name(api: TestClient, name: str) -> None:
    response = api.post("/api/deployments", json=nixl_1p1d(name))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "name"]


@pytest.mark.parametrize("name", NAMES.values(), ids=NAMES.keys())
def test_a_hostile_group_name_is_422_at_the_group(api: TestClient, name: str) -> None:
    response = api.post("/api/deployments", json=edited(nixl_1p1d(), ("groups", 0, "name"), name))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "groups", 0, "name"]


@pytest.mark.parametrize(
    "path",
    [
        "..%2f..%2fetc%2fpasswd",
        "%2e%2e",
        "pd%00x",
        "%E2%80%AEpd",
        "p" * 10_000,
        "a/../b",
        "%252e%252e",
    ],
)
def test_hostile_names_in_paths_are_404(api: TestClient, path: str) -> None:
    for suffix in ("", "/status", "/commands", "/revisions", "/logs/..%2f..%2fpdctl.db"):
        response = api.get(f"/api/deployments/{path}{suffix}")
        assert response.status_code == 404, (path, suffix, response.text[:200])


@pytest.mark.parametrize(
    "arg, says",
    [
        ("--port=1", "--port is set by pdctl"),
        ("--port", "--port is set by pdctl"),
        ("--por=1", "vLLM reads it as --port"),
        ("--max_num_seqs=1", "vLLM reads it as --max-num-seqs"),
        ("--served-model=x", "vLLM reads it as --served-model-name"),
        ("-tp2", "vLLM reads it as -tp"),
        ("--KV-TRANSFER-config={}", "is not a flag of the stand-in"),
        ("; rm -rf /", "shell syntax (';')"),
        ("$(id)", "shell syntax ('$(')"),
        ("`id`", "shell syntax ('`')"),
        ("--x=${HOME}", "shell syntax ('${')"),
        ("--seed=1 && id", "shell syntax ('&&')"),
        ("--seed=1 | nc", "shell syntax ('|')"),
        ("--seed\n--port=1", "newlines"),
        ("--seed\x00", "NUL"),
    ],
)
def test_extra_args_that_inject_flags_or_shell_are_422_at_the_arg(
    api: TestClient, arg: str, says: str | None
) -> None:
    for body, loc in (
        (nixl_1p1d(extra_args=["--seed=7", arg]), ["body", "extra_args", 1]),
        (
            edited(nixl_1p1d(), ("groups", 1, "extra_args"), [arg]),
            ["body", "groups", 1, "extra_args", 0],
        ),
    ):
        response = api.post("/api/deployments", json=body)
        if says is None:  # flags are case-sensitive: this one is vLLM's unknown-flag error
            assert response.status_code == 201
            api.delete("/api/deployments/pd")
            continue
        assert response.status_code == 422, response.text
        [item] = response.json()["detail"]
        assert item["loc"] == loc and says in item["msg"], item


def test_an_oversized_extra_arg_and_too_many_are_422(api: TestClient) -> None:
    too_long = api.post("/api/deployments", json=nixl_1p1d(extra_args=["--x=" + "y" * 600]))
    assert too_long.status_code == 422
    assert too_long.json()["detail"][0]["loc"] == ["body", "extra_args", 0]
    too_many = api.post("/api/deployments", json=nixl_1p1d(extra_args=["--seed=1"] * 65))
    assert too_many.json()["detail"][0]["loc"] == ["body", "extra_args"]


ODD_BUT_INERT = [
    "--chat-template={{ messages }} & more",
    "--response-role=ünïcödé 🙂 \u202eRTL",
    '--override-generation-config={"temperature": 0.5}',
    "--root-path=a b  c",
    "--revision='quoted' \"twice\"",
    "--code-revision=$HOME",
    "--tokenizer-revision=>out <in",
    "--ignore-patterns=*",
]


def test_accepted_odd_args_reach_argv_verbatim_as_one_element(api: TestClient) -> None:
    body = nixl_1p1d(
        "inert",
        engine="vllm",
        model='tiny"model";$(id)',
        extra_args=ODD_BUT_INERT,
        env={"VLLM_LOGGING_PREFIX": "$(id); rm -rf / `x`\nline"},
    )
    assert api.post("/api/deployments", json=body).status_code == 201
    commands = api.get("/api/deployments/inert/commands").json()
    for name in ("prefill-0", "decode-0"):
        argv = commands[name]["argv"]
        for arg in ODD_BUT_INERT:
            assert argv.count(arg) == 1, (arg, argv)
        assert 'tiny"model";$(id)' in argv
        # The line an operator copies is quoted: a shell splits it back into the same argv.
        assert shlex.split(commands[name]["command"]) == argv
        assert commands[name]["env"]["VLLM_LOGGING_PREFIX"] == "$(id); rm -rf / `x`\nline"
    assert api.delete("/api/deployments/inert").status_code == 204


@pytest.mark.parametrize(
    "env", [{"BAD NAME": "x"}, {"../x": "x"}, {"X": "y" * 5000}, {f"V{i}": "x" for i in range(65)}]
)
def test_hostile_env_is_422_at_env(api: TestClient, env: dict) -> None:
    response = api.post("/api/deployments", json=nixl_1p1d(env=env))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:2] == ["body", "env"]


def test_lists_and_names_have_limits(api: TestClient) -> None:
    groups = [{"name": f"g{i}", "role": "prefill"} for i in range(17)]
    response = api.post("/api/deployments", json=nixl_1p1d(groups=groups))
    assert response.json()["detail"][0]["loc"] == ["body", "groups"]
    response = api.post("/api/deployments", json=nixl_1p1d(model="m" * 201))
    assert response.json()["detail"][0]["loc"] == ["body", "model"]
    response = api.post("/api/deployments/x/start", params={"reason": "r" * 501})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "reason"]
