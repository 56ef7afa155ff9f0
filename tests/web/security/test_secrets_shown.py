"""Secrets in a spec are masked in every view a viewer reaches (the API, the pages, events),
the edit form is an operator's only, and an operator's form shows the UNCHANGED marker,
which saving turns back into the stored secret (issue 13, finding 6)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fastapi.testclient import TestClient

from controller.spec.redact import UNCHANGED
from tests.web.conftest import AS_OPERATOR, AS_VIEWER
from tests.web.form_fields import form_fields

HX = {"HX-Request": "true"}
# The shapes the outside probe found shown to viewers, each with a value found nowhere else.
SECRETS = {
    "api-key value starting with a dash, after =": "-sk-dash-1",
    "api-key value as the next word": "sk-word-2",
    "api-key value starting with a dash, as the next word": "-sk-dash-9",
    "JSON inside --hf-overrides": "hf-json-3",
    "kv_connector_extra_config secret key": "kv-secret-4",
    "URL password in env": "db-pw-5",
    "GITHUB_PAT": "ghp_pat6",
    "group env token": "hf-group-7",
    "event message": "ev-secret-8",
    # Issue 39: every value of a flag that takes several, in argv, events and log lists.
    "second value of --api-key": "sk-second-10",
    "second value after --api-key=": "sk-second-11",
    "second value in an event": "ev-second-12",
    "a list of keys in an event": "ev-list-13",
}


def vllm_spec(name: str = "pd") -> dict:
    """A real-vLLM spec with secrets in what today's rules let in."""
    return {
        "name": name,
        "engine": "vllm",
        "model": "Qwen/Qwen3-0.6B",
        "topology": "disaggregated",
        "connector": "NixlConnector",
        "extra_args": [
            f"--api-key={SECRETS['api-key value starting with a dash, after =']}",
            "--hf-overrides",
            json.dumps({"api_key": SECRETS["JSON inside --hf-overrides"], "n": 1}),
        ],
        "env": {"HF_TOKEN": SECRETS["group env token"] + "-top"},
        "groups": [
            {
                "name": "prefill",
                "role": "prefill",
                "env": {"HF_TOKEN": SECRETS["group env token"]},
                "extra_args": ["--api-key", SECRETS["api-key value as the next word"]],
            },
            {"name": "decode", "role": "decode"},
        ],
    }


def stored_with_every_shape(client: TestClient, name: str = "pd") -> None:
    """The deployment's stored revision rewritten in the SQLite file to hold every shape, as
    a spec stored before today's rules would (env names the allowlist may refuse now)."""
    assert client.post("/api/deployments", json=vllm_spec(name), headers=AS_OPERATOR).is_success
    spec = vllm_spec(name)
    spec["kv_connector_extra_config"] = {
        "backends": ["UCX"],
        "secret_key": SECRETS["kv_connector_extra_config secret key"],
    }
    spec["groups"][1]["extra_args"] = [
        "--api-key",
        SECRETS["api-key value starting with a dash, as the next word"],
        SECRETS["second value of --api-key"],
        "--uvicorn-log-level",
        "info",
    ]
    spec["groups"][0]["extra_args"] = [
        f"--api-key=sk-first-{SECRETS['second value after --api-key=']}",
        SECRETS["second value after --api-key="],
    ]
    spec["env"].update(
        {
            "DATABASE_URL": f"postgres://app:{SECRETS['URL password in env']}@db:5432/pd",
            "GITHUB_PAT": SECRETS["GITHUB_PAT"],
        }
    )
    full = client.get(f"/api/deployments/{name}", headers=AS_OPERATOR).json()["spec"]
    full.update(spec)
    with sqlite3.connect(client.app.state.settings.db) as db:
        db.execute(
            "UPDATE revisions SET spec = ? WHERE deployment_id = "
            "(SELECT id FROM deployments WHERE name = ?)",
            (json.dumps(full), name),
        )
    client.app.state.store.record(
        "ci",
        "note",
        f"retrying with --api-key {SECRETS['event message']} {SECRETS['second value in an event']}",
        name,
    )
    client.app.state.store.record(
        "ci",
        "note",
        f"non-default args: {{'api_key': ['k', '{SECRETS['a list of keys in an event']}']}}",
        name,
    )


@pytest.fixture
def stored(secured: TestClient) -> TestClient:
    stored_with_every_shape(secured)
    return secured


@pytest.fixture
def created(secured: TestClient) -> TestClient:
    """A deployment with secrets in what today's rules accept, for the form to save."""
    assert secured.post("/api/deployments", json=vllm_spec(), headers=AS_OPERATOR).is_success
    return secured


@pytest.mark.parametrize(
    "path",
    [
        "/api/deployments",
        "/api/deployments/pd",
        "/api/deployments/pd/revisions/1",
        "/api/deployments/pd/diff?from=1&to=1",
        "/api/deployments/pd/commands",
        "/api/events",
        "/",
        "/deployments/pd",
        "/deployments/pd/events",
    ],
)
def test_no_view_a_viewer_reaches_shows_a_secret(stored: TestClient, path: str) -> None:
    response = stored.get(path, headers=AS_VIEWER)
    assert response.status_code == 200, response.text
    for shape, secret in SECRETS.items():
        assert secret not in response.text, f"{shape} shown at {path}"


def test_the_operator_api_still_shows_what_runs(stored: TestClient) -> None:
    spec = stored.get("/api/deployments/pd", headers=AS_OPERATOR).json()["spec"]
    assert spec["env"]["GITHUB_PAT"] == SECRETS["GITHUB_PAT"]


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_viewer_gets_403_on_the_edit_form(stored: TestClient, method: str) -> None:
    if method == "get":
        response = stored.get("/deployments/pd/edit", headers=AS_VIEWER)
    else:
        response = stored.post("/deployments/pd/edit", data={"action": "save"}, headers=AS_VIEWER)
    assert response.status_code == 403
    assert "may only read" in response.text
    for secret in SECRETS.values():
        assert secret not in response.text


def edit_page(client: TestClient) -> dict[str, str]:
    page = client.get("/deployments/pd/edit", headers=AS_OPERATOR)
    assert page.status_code == 200
    for shape, secret in SECRETS.items():
        assert secret not in page.text, f"{shape} in the operator's form"
    assert UNCHANGED in page.text
    return form_fields(page.text)


def save(client: TestClient, fields: dict[str, str]):
    return client.post(
        "/deployments/pd/edit", data={**fields, "action": "save"}, headers={**HX, **AS_OPERATOR}
    )


def test_saving_the_form_as_shown_keeps_every_stored_secret(created: TestClient) -> None:
    before = created.get("/api/deployments/pd", headers=AS_OPERATOR).json()["spec"]
    fields = edit_page(created)
    fields["slo.ttft_ms"] = "750"  # a change, so that a revision is written
    response = save(created, fields)
    assert response.headers.get("hx-redirect") == "/deployments/pd", response.text
    after = created.get("/api/deployments/pd", headers=AS_OPERATOR).json()
    assert after["revision"] == 2
    assert UNCHANGED not in json.dumps(after["spec"])
    assert after["spec"]["slo"]["ttft_ms"] == 750
    for key in ("env", "extra_args", "kv_connector_extra_config", "groups"):
        assert after["spec"][key] == before[key], key


def test_a_secret_typed_anew_is_stored_as_typed(created: TestClient) -> None:
    fields = edit_page(created)
    lines = fields["extra_args"].splitlines()
    assert lines[0] == f"--api-key={UNCHANGED}"
    lines[0] = "--api-key=sk-brand-new"
    fields["extra_args"] = "\n".join(lines)
    response = save(created, fields)
    assert response.headers.get("hx-redirect") == "/deployments/pd", response.text
    spec = created.get("/api/deployments/pd", headers=AS_OPERATOR).json()["spec"]
    assert spec["extra_args"][0] == "--api-key=sk-brand-new"
    assert spec["extra_args"][2] == vllm_spec()["extra_args"][2]  # the JSON one kept


def test_a_marker_that_stands_for_no_stored_secret_is_refused(created: TestClient) -> None:
    fields = edit_page(created)
    fields["extra_args"] += f"\n--hf-token={UNCHANGED}"
    response = save(created, fields)
    assert response.status_code == 422 and "type the value again" in response.text
    assert created.get("/api/deployments/pd", headers=AS_OPERATOR).json()["revision"] == 1
