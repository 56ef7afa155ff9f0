"""The cluster as a person reads it: nodes head first then by address, each with what runs on
it (from status rows); the service's listing on one host and on a fake cluster, and a cluster
that does not answer as a 503 in one line."""

from __future__ import annotations

import asyncio

import pytest

from controller import cluster_nodes as nodes_module
from controller.cluster_nodes import ClusterUnreachable
from controller.launch.cluster_view import NodeProcess, cluster_view
from controller.launch.placement import Node
from controller.launch.ports import allocate
from controller.service import ControlService
from tests.controller.factories import cluster_nodes, gpu_pair, tiny_pair
from tests.controller.fakes import FakeBackend
from tests.controller.supervise.test_supervisor import Harness

A, B, C = cluster_nodes()


def row(name: str, node: str | None, state: str = "RUNNING", role: str = "decode") -> dict:
    return {"name": name, "node": node, "state": state, "role": role}


def test_each_node_lists_its_processes_and_stopped_ones_run_nowhere() -> None:
    w10 = Node("d" * 56, "127.0.0.10")
    views = cluster_view(
        [w10, C, B, A],
        {
            "pd": [row("proxy", A.id, role="proxy"), row("decode-0", B.id, "BACKOFF")],
            "old": [row("decode-0", B.id, "STOPPED")],
            "unplaced": [row("prefill-0", None, "FATAL")],
        },
    )
    assert [v.node.address for v in views] == ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.10"]
    assert views[0].processes == (NodeProcess("pd", "proxy", "proxy", "RUNNING"),)
    assert views[1].processes == (NodeProcess("pd", "decode-0", "decode", "BACKOFF"),)
    assert views[2].processes == views[3].processes == ()


def test_on_one_host_every_process_is_on_it() -> None:
    here = Node("local", "127.0.0.1", head=True)
    (view,) = cluster_view([here], {"pd": [row("proxy", None), row("decode-0", None)]}, "local")
    assert [p.process for p in view.processes] == ["proxy", "decode-0"]


def test_the_service_lists_a_fake_cluster_with_what_runs_where(tmp_path) -> None:
    async def scenario():
        h = Harness(tmp_path, backend=FakeBackend(nodes=cluster_nodes()))
        service = ControlService(h.sup, lambda *e: None)
        spec = gpu_pair()
        await service.start("tiny-pd", spec, allocate(spec), "alice", None, 1)
        await h.polls(3)
        views = await service.cluster()
        on = {v.node.address: [p.process for p in v.processes] for v in views}
        assert on == {
            "127.0.0.2": ["proxy", "prefill-0"],
            "127.0.0.3": ["decode-0"],
            "127.0.0.4": [],
        }
        h.backend.lose_node("127.0.0.3")
        await h.polls(6)
        views = await service.cluster()
        assert [v.node.alive for v in views] == [True, False, True]
        assert [p.process for p in views[2].processes] == ["decode-0"]

    asyncio.run(scenario())


def test_the_service_on_local_processes_lists_this_host(tmp_path) -> None:
    async def scenario():
        h = Harness(tmp_path)
        service = ControlService(h.sup, lambda *e: None)
        spec = tiny_pair()
        await service.start("tiny-pd", spec, allocate(spec), "alice", None, 1)
        (view,) = await service.cluster()
        assert (view.node.id, view.node.head) == ("local", True)
        assert [p.process for p in view.processes] == ["proxy"]  # instances wait for it

    asyncio.run(scenario())


class Unanswering(FakeBackend):
    def __init__(self, error: BaseException | None = None) -> None:
        super().__init__(nodes=cluster_nodes())
        self.error = error

    async def nodes(self) -> list[Node]:
        if self.error is None:
            await asyncio.sleep(3600)
        raise self.error


def test_a_cluster_that_raises_is_unreachable_in_one_line(tmp_path) -> None:
    error = ConnectionError("Traceback (most recent call last):\n  File ...\nGCS is gone")
    h = Harness(tmp_path, backend=Unanswering(error))
    with pytest.raises(ClusterUnreachable) as caught:
        asyncio.run(ControlService(h.sup, lambda *e: None).cluster())
    assert caught.value.status == 503
    assert caught.value.message == "the cluster does not answer: GCS is gone"


def test_a_cluster_that_hangs_is_unreachable_after_the_timeout(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(nodes_module, "NODES_TIMEOUT_S", 0.05)
    h = Harness(tmp_path, backend=Unanswering())
    with pytest.raises(ClusterUnreachable, match=r"did not list its nodes within 0\.05 s"):
        asyncio.run(ControlService(h.sup, lambda *e: None).cluster())
