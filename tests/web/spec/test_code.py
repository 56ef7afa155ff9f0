"""The probe's ways of running code through a spec, through the API: each a 422 naming the
field, with what is allowed; and the audited override that lets exactly one through."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.specs import edited, nixl_1p1d


def refused(client: TestClient, body: dict) -> list[dict]:
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 422, response.text
    assert client.get("/api/deployments").json() == []
    return response.json()["detail"]


@pytest.mark.parametrize(
    "env",
    [
        {"PYTHONWARNINGS": "ignore::antigravity.X"},
        {"BROWSER": "/tmp/script.sh"},
        {"OPENSSL_CONF": "/tmp/evil.cnf"},
        {"GCONV_PATH": "/tmp/gconv"},
        {"VLLM_LOGGING_CONFIG_PATH": "/tmp/log.json"},
        {"VLLM_PLUGINS": "evil"},
        {"LD_PRELOAD": "/tmp/x.so"},
    ],
)
@pytest.mark.parametrize("engine", ["sim", "vllm"])
def test_code_through_env_is_a_422_at_the_name(client: TestClient, env: dict, engine: str) -> None:
    [name] = env
    for body, loc in (
        (nixl_1p1d(engine=engine, env=env), ["body", "env", name]),
        (
            edited(nixl_1p1d(engine=engine), ("groups", 0, "env"), env),
            ["body", "groups", 0, "env", name],
        ),
    ):
        [item] = refused(client, body)
        assert item["loc"] == loc and item["type"] == "env_not_allowed"
        assert item["msg"].startswith(name) and "unsafe_allow.env" in item["msg"]


@pytest.mark.parametrize(
    "args",
    [
        ["--trust-remote-code"],
        ["--middleware", "evil.App"],
        ["--tool-parser-plugin", "/tmp/p.py"],
        ["--config", "/tmp/flags.yaml"],
        ["--worker-extension-cls=evil.W"],
        ["--foo", "--host=0.0.0.0"],
    ],
)
@pytest.mark.parametrize("engine", ["sim", "vllm"])
def test_code_through_argv_is_a_422_at_the_token(
    client: TestClient, args: list[str], engine: str
) -> None:
    [item] = refused(client, nixl_1p1d(engine=engine, extra_args=args))
    assert item["loc"] == ["body", "extra_args", len(args) - 1 if "--foo" in args else 0]


def test_a_model_that_would_be_a_flag_is_a_422_at_model(client: TestClient) -> None:
    [item] = refused(client, nixl_1p1d(engine="vllm", model="--host=0.0.0.0"))
    assert item["loc"] == ["body", "model"] and "read it as a flag" in item["msg"]


def test_an_override_needs_the_host_setting_and_names_what_it_lets_through(make_client) -> None:
    body = nixl_1p1d(
        engine="vllm",
        extra_args=["--trust-remote-code"],
        unsafe_allow={"args": ["--trust-remote-code"], "reason": "model ships its own code"},
    )
    off = refused(make_client(), body)
    assert [(i["loc"], i["type"]) for i in off] == [
        (["body", "unsafe_allow"], "unsafe_allow_off"),
        (["body", "extra_args", 0], "arg_not_allowed"),
    ]
    operator_host = make_client(allow_code_env=True)
    created = operator_host.post("/api/deployments", json=body)
    assert created.status_code == 201, created.text
    stored = operator_host.get("/api/deployments/pd").json()["spec"]
    assert stored["unsafe_allow"]["reason"] == "model ships its own code"
    assert (
        operator_host.get("/api/deployments/pd/commands")
        .json()["prefill-0"]["argv"]
        .count("--trust-remote-code")
        == 1
    )


def test_every_revision_carrying_an_override_says_so_in_its_event(make_client) -> None:
    client = make_client(allow_code_env=True)
    unsafe = {"env": ["LD_PRELOAD"], "reason": "vendor allocator, ticket 42"}
    body = nixl_1p1d(env={"LD_PRELOAD": "/opt/a.so"}, unsafe_allow=unsafe)
    assert client.post("/api/deployments", json=body).status_code == 201
    changed = {**body, "time_scale": 2.0}
    assert client.put("/api/deployments/pd", json=changed).status_code == 200
    updated, created = client.get("/api/events", params={"deployment": "pd"}).json()
    for event in (updated, created):
        assert event["message"].endswith(
            "; engine allowlists overridden for LD_PRELOAD (vendor allocator, ticket 42)"
        )
        assert event["detail"]["unsafe_allow"] == {"args": [], **unsafe}
    plain = client.put("/api/deployments/pd", json=nixl_1p1d(time_scale=2.0))
    assert plain.status_code == 200
    latest = client.get("/api/events", params={"deployment": "pd"}).json()[0]
    assert "overridden" not in latest["message"] and "unsafe_allow" not in latest["detail"]
