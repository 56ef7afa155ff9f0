"""Every validation rule through the API: a 422 in FastAPI's shape naming the field."""

from __future__ import annotations

import socket

import pytest
from fastapi.testclient import TestClient

from tests.controller.spec.test_deployment import BROKEN
from tests.specs import colocated, edited, moriio_1p1d, nixl_1p1d


def detail(client: TestClient, body: dict) -> list[dict]:
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 422, response.text
    return response.json()["detail"]


@pytest.mark.parametrize(("body", "loc", "phrase"), BROKEN.values(), ids=BROKEN.keys())
def test_each_cross_field_rule_is_a_422_at_its_field(
    client: TestClient, body: dict, loc: tuple, phrase: str
) -> None:
    [item] = detail(client, body)
    assert item["loc"] == ["body", *loc]
    assert item["type"] == "value_error"
    assert phrase in item["msg"]


@pytest.mark.parametrize(
    ("body", "loc", "type_"),
    [
        (nixl_1p1d(name="a" * 41), ["body", "name"], "string_too_long"),
        (nixl_1p1d(name="Has Spaces"), ["body", "name"], "string_pattern_mismatch"),
        (
            nixl_1p1d(groups=[{"name": f"g{i}", "role": "prefill"} for i in range(17)]),
            ["body", "groups"],
            "too_long",
        ),
        (
            edited(nixl_1p1d(), ("groups", 0, "gpus"), [-1]),
            ["body", "groups", 0, "gpus", 0],
            "greater_than_equal",
        ),
        (nixl_1p1d(extra_args=["--x"] * 65), ["body", "extra_args"], "too_long"),
    ],
)
def test_field_shapes_are_fastapi_422s(
    client: TestClient, body: dict, loc: list, type_: str
) -> None:
    assert (detail(client, body)[0]["loc"], detail(client, body)[0]["type"]) == (loc, type_)


def test_a_port_of_another_deployment_is_422_naming_both(client: TestClient) -> None:
    other = client.post("/api/deployments", json=moriio_1p1d("other", tp=4)).json()
    handshake = other["ports"]["instances"]["decode-0"]["handshake"]
    body = edited(colocated(), ("groups", 0, "ports"), [{"http": handshake + 3}])
    [item] = detail(client, body)
    assert item == {
        "loc": ["body", "groups", 0, "ports", 0, "http"],
        "type": "port_conflict",
        "msg": f"port {handshake + 3} (HTTP) is claimed by deployment 'other'",
    }


def test_a_given_port_busy_on_the_host_is_422(client: TestClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        [item] = detail(client, nixl_1p1d(proxy={"port": port}))
    assert item == {
        "loc": ["body", "proxy", "port"],
        "type": "port_busy",
        "msg": f"port {port} (the proxy's HTTP port) is in use on this host",
    }


def test_allocation_skips_ports_busy_on_the_host(make_client) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        client = make_client(port_range=(port, port + 50))
        ports = client.post("/api/deployments", json=nixl_1p1d()).json()["ports"]
    claimed = {ports["proxy"], ports["registry"]} | {
        p[k] for p in ports["instances"].values() for k in ("http", "side_channel")
    }
    assert port not in claimed and all(port < p <= port + 50 for p in claimed)


@pytest.mark.parametrize(
    ("over", "loc", "msg"),
    [
        ({"model": "gpt-5"}, ["body", "model"], "the stand-in has no model profile 'gpt-5'"),
        ({"hardware": "tpu"}, ["body", "hardware"], "the stand-in has no hardware profile 'tpu'"),
    ],
)
def test_unknown_stand_in_profiles_are_422(
    client: TestClient, over: dict, loc: list, msg: str
) -> None:
    [item] = detail(client, nixl_1p1d(**over))
    assert (item["loc"], item["type"]) == (loc, "unknown_profile")
    assert item["msg"].startswith(msg)


def test_env_and_args_off_the_engine_allowlists_are_422_unless_an_audited_override(
    make_client,
) -> None:
    body = edited(nixl_1p1d(), ("groups", 0, "env"), {"LD_PRELOAD": "/evil.so"})
    [item] = detail(make_client(), body)
    assert (item["loc"], item["type"]) == (
        ["body", "groups", 0, "env", "LD_PRELOAD"],
        "env_not_allowed",
    )
    assert item["msg"].startswith("LD_PRELOAD is not an engine setting a spec may give")
    assert "unsafe_allow.env" in item["msg"] and "PDCTL_ALLOW_CODE_ENV" in item["msg"]
    allowed = make_client(allow_code_env=True)
    # the host setting alone is no longer enough: the spec must name it, with a reason
    assert allowed.post("/api/deployments", json=body).status_code == 422
    body["unsafe_allow"] = {"env": ["LD_PRELOAD"], "reason": "vendor allocator, ticket 42"}
    assert allowed.post("/api/deployments", json=body).status_code == 201
    assert [i["type"] for i in detail(make_client(), {**body, "name": "pd2"})] == [
        "unsafe_allow_off",
        "env_not_allowed",
    ]


def test_put_is_validated_like_post(client: TestClient) -> None:
    client.post("/api/deployments", json=nixl_1p1d())
    response = client.put("/api/deployments/pd", json=nixl_1p1d(model="nope"))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "model"]
    assert client.get("/api/deployments/pd").json()["revision"] == 1
