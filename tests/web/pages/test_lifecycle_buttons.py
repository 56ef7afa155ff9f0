"""The deployment page's lifecycle buttons: the primary one is the action that fits the
state (Start a stopped deployment, Stop a running one, Restart one with a process down, none
while it starts), and the topology poll swaps them with the state badge."""

from __future__ import annotations

import re

import pytest

from tests.specs import colocated
from tests.web.routes.advise.test_bench_api import FakeController
from web.pages.main import primary_action

HX = {"HX-Request": "true"}


class Units(FakeController):
    def __init__(self, *states: str) -> None:
        super().__init__()
        self.states = states

    def status(self, name: str) -> list[dict]:
        return [{"name": f"p-{i}", "state": s} for i, s in enumerate(self.states)]


def primary(html: str) -> list[str]:
    """The data-action of every button marked primary in the lifecycle controls."""
    controls = html[html.index('id="lifecycle"') :]
    controls = re.split(r"</span>|</div>", controls, maxsplit=1)[0]
    return re.findall(r'<button class="[^"]*\bprimary\b[^"]*"[^>]*data-action="([a-z]+)"', controls)


@pytest.mark.parametrize(
    ("states", "action"),
    [
        ((), "start"),  # never started
        (("STOPPED", "EXITED"), "start"),
        (("RUNNING", "RUNNING"), "stop"),
        (("RUNNING", "FATAL"), "restart"),
        (("RUNNING", "BACKOFF"), "restart"),
        (("RUNNING", "EXITED"), "restart"),  # degraded
    ],
)
def test_the_primary_button_fits_the_state(make_client, states, action):
    client = make_client(controller=False)
    client.app.state.controller = Units(*states)
    assert client.post("/api/deployments", json=colocated("solo")).status_code == 201
    assert primary(client.get("/deployments/solo").text) == [action]


def test_no_button_is_primary_while_the_deployment_starts(make_client):
    client = make_client(controller=False)
    client.app.state.controller = Units("RUNNING", "STARTING")
    assert client.post("/api/deployments", json=colocated("solo")).status_code == 201
    assert primary(client.get("/deployments/solo").text) == []
    assert primary_action("switching") is None and primary_action("stopping") is None


def test_the_topology_poll_swaps_the_buttons_with_the_state(make_client):
    client = make_client(controller=False)
    controller = Units("STOPPED")
    client.app.state.controller = controller
    assert client.post("/api/deployments", json=colocated("solo")).status_code == 201
    assert primary(client.get("/deployments/solo").text) == ["start"]
    controller.states = ("RUNNING",)
    fragment = client.get("/deployments/solo/topology", headers=HX).text
    assert 'hx-swap-oob="innerHTML:#lifecycle"' in fragment
    swapped = fragment.split('innerHTML:#lifecycle">', 1)[1]
    assert primary('<span id="lifecycle">' + swapped) == ["stop"]
    assert 'data-state="running"' in fragment
