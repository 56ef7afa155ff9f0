"""Where each process was placed, kept: the rows of a placement and what moved (pure), and the
log on a fake cluster: every process at a start, only the moved one when a node dies."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from controller.backends.local import LOCAL_NODE_ID
from controller.launch.placement import Node, Placed
from controller.launch.ports import allocate
from controller.service import ControlService
from controller.supervise.placement_log import PlacementLog, moved, rows_of
from state.placement_store import PlacedProcess
from tests.controller.factories import cluster_nodes, gpu_pair, tiny_pair
from tests.controller.fakes import FakeBackend
from tests.controller.supervise.test_supervisor import Harness

A, B, C = cluster_nodes()


class MemoryBook:
    """The placement store as a dict: process -> row."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, list[str], bool]] = []

    def keep(self, deployment: str, placed, *, whole: bool = False) -> None:
        placed = list(placed)
        self.writes.append((deployment, [p.process for p in placed], whole))
        if whole:
            self.rows = {}
        self.rows.update({p.process: p for p in placed})

    def of(self, deployment: str) -> list[PlacedProcess]:
        return list(self.rows.values())


def test_rows_of_a_cluster_placement_carry_each_node_and_the_gpus_asked() -> None:
    placed = Placed({"proxy": A, "prefill-0": A, "decode-0": B})
    assert rows_of(gpu_pair(), placed, None) == [
        PlacedProcess("proxy", A.id, "127.0.0.2", 0.0),
        PlacedProcess("prefill-0", A.id, "127.0.0.2", 1.0),
        PlacedProcess("decode-0", B.id, "127.0.0.3", 1.0),
    ]


def test_rows_on_one_host_put_every_process_on_it_and_none_without_a_node() -> None:
    here = Node(LOCAL_NODE_ID, "127.0.0.1", head=True)
    rows = rows_of(tiny_pair(), None, here)
    assert [(r.process, r.node_id, r.node_address, r.gpus) for r in rows] == [
        ("proxy", "local", "127.0.0.1", 0.0),
        ("prefill-0", "local", "127.0.0.1", 0.0),
        ("decode-0", "local", "127.0.0.1", 0.0),
    ]
    assert rows_of(tiny_pair(), None, None) == []
    assert [r.process for r in rows_of(tiny_pair(), Placed({"proxy": A}), None)] == ["proxy"]


def test_moved_is_what_changed_node_or_gpus_or_was_never_kept() -> None:
    @dataclass
    class Stored:
        process: str
        node_id: str
        node_address: str
        gpus: float

    stored = [Stored("proxy", A.id, A.address, 0.0), Stored("decode-0", B.id, B.address, 1.0)]
    now = [
        PlacedProcess("proxy", A.id, A.address, 0.0),
        PlacedProcess("decode-0", C.id, C.address, 1.0),
        PlacedProcess("prefill-0", A.id, A.address, 1.0),
    ]
    assert [p.process for p in moved(stored, now)] == ["decode-0", "prefill-0"]
    assert moved(stored, now[:1]) == []


def test_a_start_keeps_every_process_and_a_lost_node_only_the_instance_that_moved(tmp_path):
    async def scenario():
        h = Harness(tmp_path, backend=FakeBackend(nodes=cluster_nodes()))
        events: list[tuple] = []
        book = MemoryBook()
        log = PlacementLog(lambda *e: events.append(e), book)
        h.sup.on_event = log
        log.watch(h.sup)
        service = ControlService(h.sup, log.record, placements=log)
        spec = gpu_pair()
        await service.start("tiny-pd", spec, allocate(spec), "alice", None, 1)
        assert book.writes == [("tiny-pd", ["proxy", "prefill-0", "decode-0"], True)]
        first = {p: r.node_address for p, r in book.rows.items()}
        assert first == {"proxy": "127.0.0.2", "prefill-0": "127.0.0.2", "decode-0": "127.0.0.3"}

        await h.polls(3)
        h.backend.lose_node("127.0.0.3")
        await h.polls(6)
        assert book.writes[1:] == [("tiny-pd", ["decode-0"], False)]
        assert book.rows["decode-0"] == PlacedProcess("decode-0", C.id, "127.0.0.4", 1.0)
        kinds = [e[1] for e in events]
        assert "node_lost" in kinds and "replaced" in kinds  # every event still recorded
        assert all(len(e) == 5 for e in events)  # as Store.record takes them

    asyncio.run(scenario())


def test_on_one_host_a_start_keeps_every_process_on_this_host(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        book = MemoryBook()
        service = ControlService(
            h.sup, lambda *e: None, placements=PlacementLog(lambda *e: None, book)
        )
        spec = tiny_pair()
        await service.start("tiny-pd", spec, allocate(spec), "alice", None, 1)
        assert {(r.node_id, r.node_address) for r in book.rows.values()} == {("local", "127.0.0.1")}

    asyncio.run(scenario())
