"""One `pdctl proxy` serving a MoRIIO read group and a write group at once, both registered over
ZMQ by real stand-ins; `pdctl bench` through each group; a killed instance drops out."""

import signal

import pytest

from harness.processes import ADMIN, free_port, http_post, running
from harness.stack import bench, gauge, instances, moriio_sim, proxy, wait_until, zmq_address

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("moriio")
    ping = free_port()
    front = proxy(tmp, "proxy", "--connector", "moriio", registry_port=ping)
    with running(front):
        stand_ins = {
            ("read", "prefill"): moriio_sim(tmp, "read-p", "kv_producer", True, ping),
            ("read", "decode"): moriio_sim(tmp, "read-d", "kv_consumer", True, ping),
            ("write", "prefill"): moriio_sim(tmp, "write-p", "kv_producer", False, ping),
            ("write", "decode"): moriio_sim(tmp, "write-d", "kv_consumer", False, ping),
        }
        with running(*stand_ins.values()):
            wait_until(lambda: len(instances(front)) == 4, 30, "four registrations")
            yield tmp, front, stand_ins


def served(stand_ins):
    return {
        key: gauge(p, "vllm:request_success_total", finished_reason="length")
        for key, p in stand_ins.items()
    }


def set_paused(front, group, paused):
    status, body = http_post(
        f"{front.url}/admin/groups/{group}/{'pause' if paused else 'resume'}", {}, headers=ADMIN
    )
    assert status == 200, body


def test_registrations_land_in_the_group_of_their_mode(groups):
    _, front, stand_ins = groups
    seen = {(i["group"], i["role"]): i for i in instances(front)}
    assert set(seen) == set(stand_ins)
    for key, proc in stand_ins.items():
        assert seen[key]["url"] == proc.url
        assert seen[key]["source"] == "registry"
        assert seen[key]["zmq_address"] == zmq_address(proc)


@pytest.mark.parametrize("group", ["read", "write"])
def test_bench_through_one_group(groups, group):
    tmp, front, stand_ins = groups
    other = "write" if group == "read" else "read"
    before = served(stand_ins)
    set_paused(front, other, True)
    try:
        result = bench(
            tmp,
            front.url,
            "--request-rate",
            "40",
            "--num-prompts",
            "12",
            "--input-len",
            "96",
            "--output-len",
            "8",
            name=f"bench-{group}",
        )
    finally:
        set_paused(front, other, False)
    assert result["completed"] == 12 and result["failed"] == 0
    assert result["total_output_tokens"] == 12 * 8  # exactly what was asked, not one fewer
    after = served(stand_ins)
    assert after[(group, "prefill")] - before[(group, "prefill")] == 12
    assert after[(group, "decode")] - before[(group, "decode")] == 12
    assert after[(other, "decode")] == before[(other, "decode")]
    decode = stand_ins[(group, "decode")]
    assert gauge(decode, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer") > 0


def test_both_groups_serve_side_by_side(groups):
    tmp, front, stand_ins = groups
    before = served(stand_ins)
    result = bench(
        tmp,
        front.url,
        "--request-rate",
        "inf",
        "--num-prompts",
        "16",
        "--input-len",
        "64",
        "--output-len",
        "5",
        name="bench-both",
    )
    assert result["completed"] == 16 and result["failed"] == 0
    after = served(stand_ins)
    for group in ("read", "write"):
        assert after[(group, "decode")] - before[(group, "decode")] == 8  # round-robin


def test_killed_instance_is_dropped_and_the_other_group_keeps_serving(tmp_path):
    ping = free_port()
    front = proxy(tmp_path, "proxy", "--connector", "moriio", registry_port=ping)
    with running(front):
        procs = [
            moriio_sim(tmp_path, "rp", "kv_producer", True, ping),
            moriio_sim(tmp_path, "rd", "kv_consumer", True, ping),
            moriio_sim(tmp_path, "wp", "kv_producer", False, ping),
            moriio_sim(tmp_path, "wd", "kv_consumer", False, ping),
        ]
        with running(*procs):
            wait_until(lambda: len(instances(front)) == 4, 30, "four registrations")
            procs[3].kill(signal.SIGKILL)
            wait_until(lambda: len(instances(front)) == 3, 10, "the killed decode dropped")
            assert procs[3].url not in {i["url"] for i in instances(front)}
            for _ in range(4):  # all land on the read group now
                status, out = http_post(
                    front.url + "/v1/completions",
                    {"model": "tiny", "prompt": "hello " * 30, "max_tokens": 4, "ignore_eos": True},
                )
                assert status == 200 and out["usage"]["completion_tokens"] == 4
            procs[2].kill(signal.SIGKILL)
            wait_until(lambda: len(instances(front)) == 2, 10, "the killed prefill dropped")
