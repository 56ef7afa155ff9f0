"""/api/.../bench: bad bodies are 422s naming the field, refusals are 409s saying why, unknown
names and ids 404s, a viewer 403; and a real `pdctl bench` subprocess runs a sweep against a
fake engine listening on the deployment's proxy port, its progress and result stored; a sweep
stopped, killed at its deadline or cut by shutdown keeps the rates it had measured."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web
from fastapi.testclient import TestClient

from services.bench_runs.request import BenchRequest
from state.bench_store import BenchStore
from tests.bench.sse_server import FakeEngine
from tests.specs import colocated
from tests.web.conftest import AS_OPERATOR, AS_VIEWER, MakeClient
from web.routes.advise.bench import BenchRunOut

SMALL = {"rates": [20, 40], "num_prompts": 6, "input_len": 8, "output_len": 3}


class FakeController:
    """What the bench routes ask of the controller: every unit in `state`, no switch."""

    def __init__(self, state: str = "RUNNING") -> None:
        self.state = state
        self.rollouts = SimpleNamespace(active=lambda name: None, last=lambda name: None)
        self.switches = lambda name: []

    def drift(self, name: str, desired: object) -> list[dict]:
        return []  # the deployment page's rollout panel: no process to judge

    def status(self, name: str) -> list[dict]:
        return [{"name": "proxy", "state": self.state}, {"name": "main-0", "state": "RUNNING"}]

    def is_active(self, name: str) -> bool:
        return True

    def statuses(self) -> dict[str, list[dict]]:
        return {}  # what Ctrl-C would name as left running: nothing here

    async def close(self) -> None:
        pass


@contextmanager
def engine_on(port: int, engine: FakeEngine) -> Iterator[None]:
    """A fake OpenAI engine on the deployment's proxy port, from a thread of its own."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()

    async def main() -> None:
        runner = web.AppRunner(engine.app(), shutdown_timeout=0.2, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@pytest.fixture
def app(make_client: MakeClient) -> TestClient:
    client = make_client(controller=False)
    client.app.state.controller = FakeController()
    assert client.post("/api/deployments", json=colocated("solo")).status_code == 201
    return client


def proxy_port(client: TestClient) -> int:
    return client.get("/api/deployments/solo").json()["ports"]["proxy"]


def wait_for(client: TestClient, run_id: int, predicate, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/api/bench/{run_id}").json()
        if predicate(run):
            return run
        time.sleep(0.1)
    raise TimeoutError(run)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({}, ["body", "rates"]),
        ({"rates": []}, ["body", "rates"]),
        ({"rates": [0]}, ["body", "rates", 0]),
        ({"rates": [2, 51]}, ["body", "rates", 1]),
        ({"rates": list(range(1, 14))}, ["body", "rates"]),
        ({"rates": [1], "num_prompts": 0}, ["body", "num_prompts"]),
        ({"rates": [1], "num_prompts": 2001}, ["body", "num_prompts"]),
        ({"rates": [0.1], "num_prompts": 100}, ["body", "num_prompts"]),  # 1,000 s of arrivals
        ({"rates": [1], "input_len": 100_000}, ["body", "input_len"]),
        ({"rates": [1], "output_len": 0}, ["body", "output_len"]),
        ({"rates": [1], "slo_ttft_ms": -1}, ["body", "slo_ttft_ms"]),
        ({"rates": [1], "slo_itl_ms": 0}, ["body", "slo_itl_ms"]),
        ({"rates": [1], "burstiness": 0}, ["body", "burstiness"]),
        ({"rates": [1], "seed": -1}, ["body", "seed"]),
        ({"rates": [1], "shell": "; rm -rf /"}, ["body", "shell"]),
    ],
)
def test_a_bad_body_is_a_422_naming_the_field(app: TestClient, body: dict, loc: list) -> None:
    response = app.post("/api/deployments/solo/bench", json=body)
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [loc]


def test_the_arrival_limit_says_how_long_they_would_take(app: TestClient) -> None:
    response = app.post("/api/deployments/solo/bench", json={"rates": [0.1], "num_prompts": 100})
    assert "1000 s, over the 900 s" in response.json()["detail"][0]["msg"]


def test_one_rate_may_be_a_number(app: TestClient) -> None:
    app.app.state.controller.state = "STOPPED"  # refused after validation: the body parsed
    response = app.post("/api/deployments/solo/bench", json={"rates": 2})
    assert response.status_code == 409


def test_a_deployment_not_running_is_a_409_saying_so(app: TestClient) -> None:
    app.app.state.controller.state = "STARTING"
    response = app.post("/api/deployments/solo/bench", json=SMALL)
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "deployment 'solo' is not running (proxy STARTING): "
        "start it, and bench once every process runs"
    )
    assert app.get("/api/deployments/solo/bench").json() == []


def test_no_controller_is_a_503(app: TestClient) -> None:
    app.app.state.controller = None
    assert app.post("/api/deployments/solo/bench", json=SMALL).status_code == 503


def test_unknown_names_and_ids_are_404s(app: TestClient) -> None:
    assert app.post("/api/deployments/nope/bench", json=SMALL).status_code == 404
    assert app.get("/api/deployments/nope/bench").status_code == 404
    assert app.get("/api/bench/999").json() == {"detail": "no bench run 999"}
    assert app.post("/api/bench/999/stop").status_code == 404
    assert app.get("/api/bench/compare", params={"ids": "999"}).status_code == 404


@pytest.mark.parametrize("ids", ["", "a,b", "1,,2", ",".join(map(str, range(1, 14)))])
def test_bad_compare_ids_are_a_422_naming_ids(app: TestClient, ids: str) -> None:
    response = app.get("/api/bench/compare", params={"ids": ids})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "ids"]


def test_a_viewer_may_list_but_not_start_or_stop(make_client: MakeClient) -> None:
    client = make_client(
        controller=False, operator_tokens=["alice:op-secret"], viewer_tokens=["bob:view-secret"]
    )
    client.app.state.controller = FakeController()
    client.post("/api/deployments", json=colocated("solo"), headers=AS_OPERATOR)
    response = client.post("/api/deployments/solo/bench", json=SMALL, headers=AS_VIEWER)
    assert response.status_code == 403
    assert client.post("/api/bench/1/stop", headers=AS_VIEWER).status_code == 403
    assert client.get("/api/deployments/solo/bench", headers=AS_VIEWER).json() == []


def test_a_sweep_runs_stores_its_result_and_refuses_a_second(app: TestClient) -> None:
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        response = app.post(
            "/api/deployments/solo/bench", json={**SMALL, "slo_ttft_ms": 500, "slo_itl_ms": 200}
        )
        assert response.status_code == 202, response.text
        run = response.json()
        assert (run["status"], run["revision"], run["total"]) == ("running", 1, 12)
        assert run["topology"]["shape"] == "colocated x1" and run["label"] == (
            "solo r1 · colocated x1"
        )
        again = app.post("/api/deployments/solo/bench", json=SMALL)
        assert again.status_code == 409
        assert again.json()["detail"].startswith(
            f"a bench run of 'solo' is going (run {run['id']})"
        )
        done = wait_for(app, run["id"], lambda r: r["status"] != "running")
    assert done["status"] == "done", done
    assert done["done"] == 12 and done["finished_at"] is not None
    assert done["config"]["slo_ttft_ms"] == 500 and done["config"]["itl_slo_stat"] == "p99"
    assert [r["request_rate"] for r in done["result"]["runs"]] == [20.0, 40.0]
    assert done["max_goodput_rate"] == 40.0
    [listed] = app.get("/api/deployments/solo/bench").json()
    assert listed["id"] == run["id"] and listed["result"] is None
    [curve] = app.get("/api/bench/compare", params={"ids": str(run["id"])}).json()["runs"]
    assert [p["rate"] for p in curve["points"]] == [20.0, 40.0]
    assert all(p["slo_attainment"] == 1.0 for p in curve["points"])
    kinds = [e["kind"] for e in app.get("/api/events", params={"deployment": "solo"}).json()]
    assert kinds[:2] == ["bench.done", "bench.started"]
    assert app.post(f"/api/bench/{run['id']}/stop").status_code == 409  # done already


def test_a_run_stops_when_asked_and_progress_moves(app: TestClient) -> None:
    slow = {"rates": [5], "num_prompts": 40, "input_len": 8, "output_len": 3}
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        run = app.post("/api/deployments/solo/bench", json=slow).json()
        moving = wait_for(app, run["id"], lambda r: r["done"] >= 2)
        assert moving["status"] == "running" and moving["done"] < 40
        stopped = app.post(f"/api/bench/{run['id']}/stop")
    assert stopped.status_code == 202
    assert stopped.json()["status"] == "stopped"
    assert stopped.json()["error"] == "stopped by anonymous after 0 of 1 rate; kept none"
    assert stopped.json()["result"] is None and stopped.json()["partial"] is False
    assert app.get(f"/api/bench/{run['id']}").json()["result"] is None


# A sweep whose first rate (40 req/s x 6) ends in well under a second and whose second (1 req/s:
# arrivals at 0.5 s .. 9.3 s) goes on for seconds: a request of the second rate done means the
# first rate's result is in the bench's file (written before the second rate starts).
TWO_PACES = {
    "rates": [40, 1],
    "num_prompts": 6,
    "input_len": 8,
    "output_len": 3,
    "slo_ttft_ms": 500,
    "slo_itl_ms": 200,
}


def second_rate_going(run: dict) -> bool:
    assert run["status"] == "running", run
    return run["done"] > TWO_PACES["num_prompts"]


def assert_kept_first_rate(run: dict, status: str, why: str) -> None:
    assert run["status"] == status, run
    assert run["error"] == f"{why} after 1 of 2 rates; kept 1"
    assert run["partial"] is True
    assert TWO_PACES["num_prompts"] < run["done"] < 12
    [first] = run["result"]["runs"]
    assert first["request_rate"] == 40.0
    assert (first["completed"], first["failed"], first["slo_attainment"]) == (6, 0, 1.0)
    assert run["result"]["partial"] == {"rates_done": 1, "rates": 2}
    assert run["max_goodput_rate"] == 40.0  # over the rates measured


def test_a_sweep_stopped_part_way_keeps_the_rates_it_measured(app: TestClient) -> None:
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        run = app.post("/api/deployments/solo/bench", json=TWO_PACES).json()
        wait_for(app, run["id"], second_rate_going)
        stopped = app.post(f"/api/bench/{run['id']}/stop")
    assert stopped.status_code == 202
    assert stopped.json()["partial"] is True and stopped.json()["result"] is None  # as listed
    assert_kept_first_rate(
        app.get(f"/api/bench/{run['id']}").json(), "stopped", "stopped by anonymous"
    )
    [listed] = app.get("/api/deployments/solo/bench").json()
    assert listed["partial"] is True and listed["result"] is None
    [curve] = app.get("/api/bench/compare", params={"ids": str(run["id"])}).json()["runs"]
    assert curve["partial"] is True and curve["rates_offered"] == 2
    assert [(p["rate"], p["completed"]) for p in curve["points"]] == [(40.0, 6)]
    events = app.get("/api/events", params={"deployment": "solo"}).json()
    assert events[0]["kind"] == "bench.stopped"
    assert events[0]["message"] == (
        f"bench run {run['id']} of solo stopped: stopped by "
        "anonymous after 1 of 2 rates; kept 1; max_goodput_rate "
        "40.0 req/s"
    )
    assert app.post(f"/api/bench/{run['id']}/stop").json() == {
        "detail": f"bench run {run['id']} is stopped already"
    }


def test_a_sweep_killed_at_its_deadline_keeps_the_rates_it_measured(
    app: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(BenchRequest, "deadline_s", lambda self: 4.0)  # mid second rate
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        run = app.post("/api/deployments/solo/bench", json=TWO_PACES).json()
        ended = wait_for(app, run["id"], lambda r: r["status"] != "running")
    assert_kept_first_rate(ended, "failed", "killed at its deadline")


def test_a_sweep_cut_by_shutdown_keeps_the_rates_it_measured(app: TestClient) -> None:
    store = BenchStore(app.app.state.store.engine)
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        run = app.post("/api/deployments/solo/bench", json=TWO_PACES).json()
        wait_for(app, run["id"], second_rate_going)
        app.__exit__(None, None, None)  # the control plane shuts down under the run
    ended = BenchRunOut.of(store.get(run["id"]), with_result=True).model_dump()
    assert_kept_first_rate(ended, "stopped", "stopped by pdctl (shutting down)")


def test_a_run_that_cannot_reach_the_proxy_fails_with_the_bench_message(app: TestClient) -> None:
    run = app.post("/api/deployments/solo/bench", json=SMALL).json()  # nothing listens
    failed = wait_for(app, run["id"], lambda r: r["status"] != "running")
    assert failed["status"] == "failed"
    assert "--base-url" in failed["error"]


def test_a_run_whose_every_request_failed_is_failed_with_its_result(app: TestClient) -> None:
    with engine_on(proxy_port(app), FakeEngine(served_model="http-500")):
        run = app.post("/api/deployments/solo/bench", json=SMALL).json()
        failed = wait_for(app, run["id"], lambda r: r["status"] != "running")
    assert failed["status"] == "failed"
    assert failed["error"] == "no request succeeded: see the proxy's log"
    assert [r["failed"] for r in failed["result"]["runs"]] == [6, 6]


def test_a_bench_run_and_the_load_button_exclude_each_other(app: TestClient) -> None:
    hx = {"HX-Request": "true"}
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        app.post("/deployments/solo/load", headers=hx, data={"rate": "5", "duration": "20"})
        refused = app.post("/api/deployments/solo/bench", json=SMALL)
        assert refused.status_code == 409
        assert refused.json()["detail"] == (
            "the dashboard's load run is going against 'solo': stop it first"
        )
        app.post("/deployments/solo/load", headers=hx, data={"action": "stop"})
        run = app.post("/api/deployments/solo/bench", json={**SMALL, "rates": [1]}).json()
        page = app.post("/deployments/solo/load", headers=hx, data={"rate": "5"})
        assert "a bench run is going against this deployment" in page.text
        assert app.post(f"/api/bench/{run['id']}/stop").json()["status"] == "stopped"


def test_a_run_left_running_by_an_earlier_process_reads_as_failed(make_client: MakeClient) -> None:
    first = make_client(controller=False)
    store = BenchStore(first.app.state.store.engine)
    run = store.create("solo", 1, {"shape": "colocated x1"}, {"rates": [1.0]}, 10, "alice")
    # A process started on the file: its lifespan marks what nothing watches any more.
    second = make_client(controller=False, db=first.app.state.settings.db)
    answer = second.get(f"/api/bench/{run.id}").json()
    assert answer["status"] == "failed"
    assert answer["error"] == "the control plane restarted during the run"


def test_a_sweep_does_not_inherit_the_control_planes_tokens(app: TestClient, monkeypatch) -> None:
    monkeypatch.setenv("PDCTL_OPERATOR_TOKENS", "ops:op-Zq81-secret")  # after the app's settings
    slow = {"rates": [5], "num_prompts": 40, "input_len": 8, "output_len": 3}
    with engine_on(proxy_port(app), FakeEngine(token_delay=0.01)):
        run = app.post("/api/deployments/solo/bench", json=slow).json()
        wait_for(app, run["id"], lambda r: r["done"] >= 1)
        pid = app.app.state.bench_runs._active["solo"].proc.pid
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert app.post(f"/api/bench/{run['id']}/stop").status_code == 202
    names = {entry.partition(b"=")[0] for entry in environ}
    assert b"PATH" in names and b"PDCTL_OPERATOR_TOKENS" not in names
