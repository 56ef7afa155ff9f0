"""The hand-off model: each overhead moves the time the way the model says, the staged path is
tens of times its bandwidth, RDMA stays at it, and the planner and the stand-in use it."""

from dataclasses import replace
from itertools import pairwise

import pytest

from domain import profiles
from simulator.config.engine import EngineSettings, KVTransferSettings
from simulator.model.handoff import HandoffLink, descriptors_per_rank, handoff_parts
from simulator.model.handoff_paths import HOST, P2P, RDMA, choose_path, path_bandwidth
from simulator.plan.cluster import Arrival, Cluster
from simulator.plan.planner import PlanSetup, parse_config
from tests.simulator.factories import scheduler

LLAMA_8B = profiles.model("llama-3.1-8b")


def parts(path=HOST, tokens=2048, block_size=16, bandwidth=16e9, step=0.0, **kw):
    return handoff_parts(path, LLAMA_8B, tokens, block_size, bandwidth, decode_step_s=step, **kw)


def test_nixl_posts_one_descriptor_per_block_per_layer_region():
    assert descriptors_per_rank(2048, 16, 32) == 128 * 32 * 2
    assert descriptors_per_rank(2049, 16, 32) == 129 * 32 * 2  # a partial block is a block
    assert descriptors_per_rank(2048, 16, 32, "MoRIIOConnector") == 32 * 2  # merged runs
    assert descriptors_per_rank(0, 16, 32) == 0


def test_time_rises_with_the_descriptor_count():
    # Smaller blocks, more descriptors: the post part grows by exactly their cost.
    times = [parts(block_size=b) for b in (128, 64, 32, 16)]
    assert [t.descriptors for t in times] == sorted(t.descriptors for t in times)
    assert all(a.total_s < b.total_s for a, b in pairwise(times))
    a, b = times[0], times[-1]
    assert b.post_s - a.post_s == pytest.approx((b.descriptors - a.descriptors) * 50e-6)


def test_time_rises_with_the_chunk_count():
    # One descriptor spanning many staging pieces (MoRIIO's merged runs on the host path).
    small, big = (parts(tokens=t, connector="MoRIIOConnector") for t in (2048, 8192))
    assert small.descriptors == big.descriptors and big.chunks > small.chunks
    assert big.staging_s - small.staging_s == pytest.approx(2 * (big.chunks - small.chunks) * 8e-6)
    cheaper = replace(HOST, chunk_s=1e-6)
    assert parts(path=cheaper).total_s < parts().total_s


def test_time_rises_with_the_decode_step():
    steps = [parts(step=s) for s in (0.0, 0.02, 0.05)]
    assert [p.notice_s for p in steps] == [0.0, 0.01, 0.025]  # half a step on average
    assert steps[0].total_s < steps[1].total_s < steps[2].total_s
    assert steps[0].transfer_s == steps[2].transfer_s  # the connector's part is unchanged


def test_staged_path_on_an_l40s_is_tens_of_times_its_pcie_figure():
    l40s = profiles.hardware("l40s")
    path = choose_path(l40s, "NixlConnector", same_node=True)
    assert path is HOST and choose_path(l40s, same_node=False) is HOST
    # 2k tokens of Llama-3.1-8B: 268 MB, 16.8 ms over PCIe twice.
    p = parts(path, bandwidth=path_bandwidth(path, l40s), step=0.03)
    assert 0.2e9 < p.kv_bytes < 0.3e9
    assert p.bandwidth_only_s == pytest.approx(0.0002 + 268.4e6 / 16e9, rel=0.01)
    assert 20 < p.total_s / p.bandwidth_only_s < 60


def test_rdma_stays_at_its_bandwidth_and_p2p_within_a_few_times():
    mi300x, h100 = profiles.hardware("mi300x"), profiles.hardware("h100")
    assert choose_path(mi300x, "MoRIIOConnector", same_node=True) is RDMA
    rdma = parts(RDMA, 8192, bandwidth=path_bandwidth(RDMA, mi300x), connector="MoRIIOConnector")
    assert rdma.transfer_s < 1.01 * rdma.bandwidth_only_s
    nixl = parts(RDMA, 8192, bandwidth=path_bandwidth(RDMA, h100))  # per-block descriptors
    assert nixl.transfer_s < 1.1 * nixl.bandwidth_only_s
    assert choose_path(h100, "NixlConnector", same_node=True) is P2P
    p2p = parts(P2P, 8192, bandwidth=path_bandwidth(P2P, h100))
    staged = parts(HOST, 8192, bandwidth=path_bandwidth(HOST, profiles.hardware("l40s")))
    ratio = p2p.transfer_s / p2p.bandwidth_only_s
    assert 1 < ratio < 6 < staged.transfer_s / staged.bandwidth_only_s


def test_paths_follow_the_hardware_and_the_deployment():
    h100, mi300x = profiles.hardware("h100"), profiles.hardware("mi300x")
    assert choose_path(h100, "NixlConnector", same_node=False) is RDMA
    assert choose_path(mi300x, "NixlConnector", same_node=True) is P2P
    assert choose_path(replace(h100, p2p=False, rdma=False)) is HOST
    assert path_bandwidth(RDMA, h100, ranks=4) == 4 * 50e9
    assert path_bandwidth(HOST, profiles.hardware("l40s"), same_node=False) == 1.25e9


def test_bad_inputs_are_refused_and_an_empty_prompt_costs_nothing():
    with pytest.raises(ValueError, match="block_size"):
        parts(block_size=0)
    assert parts(tokens=0).total_s == 0.0


def test_the_planner_charges_the_model_and_the_link_flag_replaces_only_the_bandwidth():
    config = parse_config("1p-tp1+1d-tp1:read")
    l40s = PlanSetup("llama-3.1-8b", "l40s", gpus=2)
    link = l40s.handoff(config)
    assert link.path is HOST and link.bandwidth_bytes_s == 16e9
    given = replace(l40s, link_gbps=100.0).handoff(config)
    assert given.bandwidth_bytes_s == 100e9 and given.path is HOST
    slow = link.transfer_seconds(LLAMA_8B, 2047, 16)
    fast = given.transfer_seconds(LLAMA_8B, 2047, 16)
    assert slow - fast == pytest.approx(2047 * 131072 * (1 / 16e9 - 1 / 100e9))
    mori = PlanSetup("qwen3-235b-a22b-fp8", "mi300x").handoff(parse_config("1p-tp4+1d-tp4"))
    assert mori.path is RDMA and mori.connector == "MoRIIOConnector"


def test_a_slow_hand_off_raises_the_planners_ttft():
    def ttft(handoff):
        cluster = Cluster(
            prefills=[scheduler(enable_prefix_caching=False)],
            decodes=[scheduler(enable_prefix_caching=False)],
            mode="read",
            handoff=handoff,
        )
        [result] = cluster.run([Arrival("r0", 0.0, list(range(2000)), 4)])
        return result.ttft, result.transfer_s

    fast_ttft, fast = ttft(HandoffLink(RDMA, 50e9))
    slow_ttft, slow = ttft(HandoffLink(HOST, 16e9))
    assert slow > 10 * fast
    assert slow_ttft - fast_ttft == pytest.approx(slow - fast, rel=0.05)


def test_the_stand_in_takes_its_path_from_hardware_connector_and_node():
    nixl = EngineSettings(hardware="l40s", model_profile="llama-3.1-8b", kv=KVTransferSettings())
    assert nixl.handoff_link(same_node=True).path is HOST
    h100 = replace(nixl, hardware="h100", tensor_parallel_size=2)
    assert h100.handoff_link(same_node=True).path is P2P
    across = h100.handoff_link(same_node=False)
    assert across.path is RDMA and across.bandwidth_bytes_s == 2 * 50e9
    given = replace(h100, kv_link_gbps=7.0).handoff_link(same_node=False)
    assert given.bandwidth_bytes_s == 7e9 and given.path is RDMA
    xgmi = KVTransferSettings(connector="MoRIIOConnector", extra={"backend": "xgmi"})
    mi300x = replace(nixl, hardware="mi300x", kv=xgmi)
    assert mi300x.handoff_link(same_node=True).path is P2P
    rdma = replace(mi300x, kv=KVTransferSettings(connector="MoRIIOConnector"))
    assert rdma.handoff_link(same_node=True).path is RDMA
