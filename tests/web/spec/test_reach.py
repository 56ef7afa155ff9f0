"""Issue 39's probe, through the API: a spec that gives an engine code through its env (Broken
1), a host path outside the operator's roots, a server elsewhere or a listener beyond the bound
address (Weak 5) is a 422 naming the field and why, wherever the spec gives it (top level, a
group, a render group); what the operator's roots hold passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.specs import edited, nixl_1p1d


def with_render(body: dict) -> dict:
    return {**body, "groups": [*body["groups"], {"name": "render", "role": "render"}]}


def refused(client: TestClient, body: dict) -> list[dict]:
    response = client.post("/api/deployments", json=body)
    assert response.status_code == 422, response.text
    assert client.get("/api/deployments").json() == []
    return response.json()["detail"]


def at(items: list[dict], loc: list) -> str:
    hits = [i["msg"] for i in items if i["loc"] == ["body", *loc]]
    assert hits, items
    return hits[0]


PLACES = [("env",), ("groups", 1, "env"), ("groups", 2, "env")]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("engine", ["sim", "vllm"])
def test_ucx_running_a_program_on_a_crash_is_a_422(
    client: TestClient, place: tuple, engine: str
) -> None:
    env = {"UCX_HANDLE_ERRORS": "debug", "UCX_GDB_COMMAND": "/tmp/evil.sh"}
    items = refused(client, edited(with_render(nixl_1p1d(engine=engine)), place, env))
    assert "a program UCX runs on a crash signal" in at(items, [*place, "UCX_GDB_COMMAND"])
    assert "takes one of bt, none" in at(items, [*place, "UCX_HANDLE_ERRORS"])


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("value", ["ext://evil_module", "cfg://x.y", "ext://os.system"])
def test_a_logging_stream_that_imports_a_module_is_a_422(
    client: TestClient, place: tuple, value: str
) -> None:
    env = {"VLLM_LOGGING_STREAM": value}
    items = refused(client, edited(with_render(nixl_1p1d()), place, env))
    assert "ext://sys.stderr, ext://sys.stdout" in at(items, [*place, "VLLM_LOGGING_STREAM"])


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"VLLM_CACHE_ROOT": "/etc"}, "is not under the operator's roots"),
        ({"VLLM_CONFIG_ROOT": "/etc"}, "is not under"),
        ({"HF_HOME": "/etc"}, "is not under"),
        ({"HF_HUB_CACHE": "/tmp/hub"}, "is not under"),
        ({"HF_ENDPOINT": "http://anywhere"}, "is a server elsewhere"),
        ({"VLLM_NIXL_SIDE_CHANNEL_HOST": "0.0.0.0"}, "every interface"),
        ({"VLLM_TORCH_PROFILER_DIR": "/tmp/p"}, "not an engine setting"),
        ({"UCX_NEW_KNOB": "1"}, "not an engine setting"),
    ],
)
def test_env_reaching_the_host_or_the_network_is_a_422(
    client: TestClient, env: dict, says: str
) -> None:
    [name] = env
    [item] = refused(client, edited(nixl_1p1d(), ("groups", 1, "env"), env))
    assert item["loc"] == ["body", "groups", 1, "env", name]
    assert item["type"] == "env_not_allowed" and says in item["msg"]


@pytest.mark.parametrize(
    ("args", "index", "says"),
    [
        (["--chat-template", "/etc/passwd"], 1, "'/etc/passwd' is not under"),
        (["--ssl-keyfile", "/etc/shadow"], 1, "'/etc/shadow' is not under"),
        (["--download-dir", "/etc"], 1, "'/etc' is not under"),
        (["--lora-modules", "x=/etc"], 1, "'/etc' is not under"),
        (["--data-parallel-address", "0.0.0.0"], 1, "every interface"),
        (["--kv-events-config", '{"enable_kv_cache_events": true}'], 1, "tcp://*:5557"),
        (["--otlp-traces-endpoint", "http://anywhere"], 0, "is a server elsewhere"),
        (["--structured-outputs-config.reasoning_parser_plugin=/tmp/p.py"], 0, "plugin"),
    ],
)
def test_flags_reaching_the_host_or_the_network_are_a_422(
    client: TestClient, args: list[str], index: int, says: str
) -> None:
    [item] = refused(client, nixl_1p1d(engine="vllm", extra_args=args))
    assert item["loc"] == ["body", "extra_args", index] and says in item["msg"]


def test_an_example_connector_writing_to_etc_is_a_422(client: TestClient) -> None:
    body = nixl_1p1d(
        connector="ExampleConnector", kv_connector_extra_config={"shared_storage_path": "/etc"}
    )
    [item] = refused(client, body)
    assert item["loc"] == ["body", "kv_connector_extra_config", "shared_storage_path"]
    assert "'/etc' is not under" in item["msg"] and "PDCTL_ENGINE_PATH_ROOTS" in item["msg"]


def test_paths_under_the_operators_roots_pass(make_client, tmp_path: Path) -> None:
    root = tmp_path / "models"
    client = make_client(engine_path_roots=[str(root)])
    body = nixl_1p1d(
        engine="vllm",
        connector="ExampleConnector",
        kv_connector_extra_config={"shared_storage_path": f"{root}/kv"},
        env={"HF_HOME": f"{root}/hf", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1"},
        extra_args=["--download-dir", f"{root}/w", "--chat-template", f"{root}/t.jinja"],
    )
    created = client.post("/api/deployments", json=body)
    assert created.status_code == 201, created.text
    # and the same spec on a host whose operator set no roots: only its own defaults
    other = make_client()
    items = refused(other, body)
    assert {tuple(i["loc"][1:]) for i in items} == {
        ("kv_connector_extra_config", "shared_storage_path"),
        ("env", "HF_HOME"),
        ("extra_args", 1),
        ("extra_args", 3),
    }


def test_a_relative_root_is_a_settings_error(make_client) -> None:
    with pytest.raises(ValueError, match="engine_path_roots"):
        make_client(engine_path_roots=["models"])
