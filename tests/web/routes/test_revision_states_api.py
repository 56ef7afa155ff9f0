"""Revision states through the API: a change in progress shows in the revision and the
deployment, makes every other change a 409 naming it, and survives a restart; its events
reach the live socket as they are written, with no controller (nothing polls)."""

from __future__ import annotations

from tests.specs import moriio_1p1d, spec
from tests.web.conftest import MakeClient


def test_a_change_in_progress_shows_and_refuses_other_writers(make_client: MakeClient) -> None:
    client = make_client(controller=False)
    assert client.post("/api/deployments", json=moriio_1p1d(mode="write")).status_code == 201
    store = client.app.state.store
    store.settle_change("mori", 1, "applied")  # as its start does once all of it is ready
    number = store.begin_change("mori", spec(moriio_1p1d(mode="read")), "operator:bob", "read")
    shown = client.get("/api/deployments/mori")
    assert (shown.json()["revision"], shown.json()["state"]) == (number, "in_progress")
    states = [
        (r["number"], r["state"]) for r in client.get("/api/deployments/mori/revisions").json()
    ]
    assert states == [(2, "in_progress"), (1, "applied")]
    assert client.get("/api/deployments/mori/revisions/2").json()["state"] == "in_progress"
    edit = moriio_1p1d(mode="read", tp=4)
    for answer in (
        client.put("/api/deployments/mori", json=edit),
        client.put("/api/deployments/mori", json=edit, headers={"If-Match": '"2"'}),
        client.delete("/api/deployments/mori"),
    ):
        assert answer.status_code == 409
        assert "'mori' has revision 2 in progress (read)" in answer.json()["detail"]
    # A restarted control plane on the same file shows it in progress, and can settle it.
    again = make_client(controller=False, db=client.app.state.settings.db)
    assert again.get("/api/deployments/mori").json()["state"] == "in_progress"
    again.app.state.store.settle_change("mori", number, "failed", "prefill-0 did not restart")
    shown = again.get("/api/deployments/mori").json()
    assert (shown["revision"], shown["state"]) == (1, "applied")
    answer = again.put("/api/deployments/mori", json=edit)
    assert answer.json()["revision"] == 3, answer.text


def test_a_stored_event_reaches_the_live_socket_without_a_controller(
    make_client: MakeClient,
) -> None:
    client = make_client(controller=False)
    client.post("/api/deployments", json=moriio_1p1d())
    with client.websocket_connect("/ws/deployments/mori") as ws:
        assert ws.receive_json()["type"] == "history"
        client.put("/api/deployments/mori", json=moriio_1p1d(mode="read"))
        event = ws.receive_json()
        assert (event["type"], event["kind"], event["detail"]["revision"]) == (
            "event",
            "deployment.updated",
            2,
        )
