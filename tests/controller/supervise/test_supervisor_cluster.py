"""The supervisor on a fake cluster (tests/controller/fakes.py FakeBackend with nodes): each
process placed on a node and rendered for its address, a lost node's instance placed again on
another (or FATAL saying why none fits), placement kept across supervisors, and a start that
fits nowhere refused naming the field."""

from __future__ import annotations

import asyncio

import pytest

from controller.launch.placement import Node
from controller.launch.ports import allocate
from domain.errors import SpecInvalid
from tests.controller.factories import gpu_pair
from tests.controller.fakes import FakeBackend
from tests.controller.supervise.test_supervisor import Harness

HEAD = Node("h" * 56, "127.0.0.9", gpus=0, gpus_free=0, head=True)


def nodes(*addresses: str, gpus: float = 1.0) -> list[Node]:
    return [HEAD] + [Node(a[-1] * 56, a, gpus=gpus, gpus_free=gpus) for a in addresses]


def rows(h: Harness, name: str = "tiny-pd") -> dict[str, dict]:
    return {u["name"]: u for u in h.sup.status(name)}


async def started(tmp_path, *addresses: str) -> tuple[Harness, FakeBackend]:
    """A 1P1D asking one GPU per instance, started on a fake cluster of `addresses` (plus a
    head without GPUs) and polled until it runs."""
    backend = FakeBackend(nodes=nodes(*addresses))
    h = Harness(tmp_path, backend=backend)
    spec = gpu_pair()
    await h.sup.start("tiny-pd", spec, allocate(spec))
    await h.polls(3)
    return h, backend


def run(coro):
    return asyncio.run(coro)


def test_each_process_runs_on_its_node_and_is_rendered_for_its_address(tmp_path):
    async def scenario():
        h, backend = await started(tmp_path, "127.0.0.2", "127.0.0.3")
        units = rows(h)
        assert {n: u["address"] for n, u in units.items()} == {
            "proxy": "127.0.0.9",
            "prefill-0": "127.0.0.2",
            "decode-0": "127.0.0.3",
        }
        assert set(h.states("tiny-pd").values()) == {"RUNNING"}
        prefill = next(s for s in backend.spawned if s[0] == "prefill-0")
        assert prefill[1][prefill[1].index("--host") + 1] == "127.0.0.2"
        assert prefill[2]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.2"
        proxy = next(s for s in backend.spawned if s[0] == "proxy")
        assert f"http://127.0.0.3:{units['decode-0']['ports']['http']}" in proxy[1]
        assert backend.placed["decode-0"].gpus == 1.0

    run(scenario())


def test_a_lost_nodes_instance_moves_to_a_node_that_fits(tmp_path):
    async def scenario():
        h, backend = await started(tmp_path, "127.0.0.2", "127.0.0.3", "127.0.0.5")
        backend.cluster = [  # what runs takes its GPUs
            Node(
                n.id,
                n.address,
                n.gpus,
                0.0 if n.address in ("127.0.0.2", "127.0.0.3") else n.gpus_free,
                head=n.head,
            )
            for n in backend.cluster
        ]
        backend.lose_node("127.0.0.3")
        await h.polls(1, every=0.1)
        kinds = [e[1] for e in h.events]
        assert "node_lost" in kinds
        lost = next(e for e in h.events if e[1] == "node_lost")
        assert "127.0.0.3" in lost[2] and "decode-0" in lost[2]
        await h.polls(3, every=1.0)
        units = rows(h)
        assert (
            units["decode-0"]["state"] == "RUNNING" and units["decode-0"]["address"] == "127.0.0.5"
        )
        assert units["decode-0"]["url"].startswith("http://127.0.0.5:")
        moved = next(e for e in h.events if e[1] == "replaced")
        assert "lost node 127.0.0.3" in moved[2] and "127.0.0.5" in moved[2]
        assert units["prefill-0"]["restarts"] == 0  # nothing else restarted
        assert units["proxy"]["restarts"] == 0  # the proxy is told, not restarted

    run(scenario())


def test_a_lost_nodes_instance_with_nowhere_to_go_is_fatal_saying_why(tmp_path):
    async def scenario():
        h, backend = await started(tmp_path, "127.0.0.2", "127.0.0.3")
        backend.cluster = [Node(n.id, n.address, n.gpus, 0.0, head=n.head) for n in backend.cluster]
        backend.lose_node("127.0.0.3")
        await h.polls(3, every=1.0)
        assert rows(h)["decode-0"]["state"] == "FATAL"
        fatal = next(e for e in h.events if e[1] == "fatal")
        assert "127.0.0.3" in fatal[2] and "no node fits" in fatal[2]

    run(scenario())


def test_a_start_that_fits_nowhere_is_refused_naming_the_field(tmp_path):
    async def scenario():
        h = Harness(tmp_path, backend=FakeBackend(nodes=nodes("127.0.0.2")))
        spec = gpu_pair()
        with pytest.raises(SpecInvalid) as err:
            await h.sup.start("tiny-pd", spec, allocate(spec))
        assert err.value.problems[0].loc == ("groups", 1, "placement", "gpus_per_instance")
        assert "tiny-pd" not in h.sup.deployments  # nothing started, nothing remembered

    run(scenario())


def test_a_new_supervisor_renders_the_saved_placement_and_adopts_without_restarts(tmp_path):
    async def scenario():
        h, backend = await started(tmp_path, "127.0.0.2", "127.0.0.3")
        before = rows(h)
        spawned = len(backend.spawned)
        h.sup = h.new()
        await h.polls(2)
        after = rows(h)
        assert {n: (u["pid"], u["address"]) for n, u in after.items()} == {
            n: (u["pid"], u["address"]) for n, u in before.items()
        }
        assert len(backend.spawned) == spawned

    run(scenario())
