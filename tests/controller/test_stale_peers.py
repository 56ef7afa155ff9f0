"""A prefill restart never wedges a decode: the controller restarts a decode whose KV transfers
keep failing after a prefill came back (controller/stale_peers.py)."""

from controller.health import failed_transfers
from controller.ports import allocate
from controller.stale_peers import StaleWatch
from tests.controller.factories import tiny_pair
from tests.controller.test_supervisor import Harness, run


def test_a_decode_failing_transfers_after_a_prefill_restart_is_restarted_once():
    watch = StaleWatch(failures=2, window_s=60)
    assert watch.step({"p": 10}, {"d": (20, 5.0)}, now=0) == []
    assert watch.step({"p": None}, {"d": (20, 6.0)}, now=1) == []  # the prefill is down
    assert watch.step({"p": 11}, {"d": (20, 6.0)}, now=2) == []  # back: counted from here
    assert watch.step({"p": 11}, {"d": (20, 7.0)}, now=3) == []  # one failure: not yet
    (restart,) = watch.step({"p": 11}, {"d": (20, 8.0)}, now=4)
    assert restart[0] == "d" and "since p restarted" in restart[1]
    watch.acted("d")  # the shell restarts it
    assert watch.step({"p": 11}, {"d": (20, 12.0)}, now=5) == []  # once per prefill restart


def test_a_healthy_decode_or_one_restarted_meanwhile_is_left_alone():
    watch = StaleWatch(failures=2, window_s=60)
    watch.step({"p": 10}, {"d": (20, 0.0), "e": (30, 0.0)}, now=0)
    watch.step({"p": 11}, {"d": (20, 0.0), "e": (30, 0.0)}, now=1)
    assert watch.step({"p": 11}, {"d": (20, 0.0), "e": (31, 9.0)}, now=2) == []
    assert watch.step({"p": 11}, {"d": (20, 9.0)}, now=100) == []  # past the window
    assert not watch.watching(100)


def test_the_failed_transfer_counters_are_read_from_metrics_text():
    text = (
        "# HELP vllm:nixl_num_failed_transfers x\n"
        'vllm:nixl_num_failed_transfers_total{engine="0",model_name="m"} 3.0\n'
        'vllm:nixl_num_failed_transfers_created{engine="0"} 17e8\n'
        'vllm:moriio_num_failed_transfers_total{engine="0"} 2\n'
    )
    assert failed_transfers(text) == 5.0


def test_the_supervisor_restarts_the_stale_decode_and_says_why(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        decode_port = ports.instances["decode-0"].http
        h.probe.transfer_failures[decode_port] = 0.0
        first_decode = h.backend.pid("decode-0")
        h.backend.crash("prefill-0", -9)
        await h.polls(1, every=0.1)
        await h.polls(3, every=1.0)  # respawned after its backoff, RUNNING again
        assert h.states("tiny-pd")["prefill-0"] == "RUNNING"
        h.probe.transfer_failures[decode_port] = 3.0  # its transfers through the old agent fail
        await h.polls(6, every=1.0)
        stale = [e for e in h.events if e[1] == "stale_peer"]
        assert len(stale) == 1 and "tiny-pd/decode-0: restarting" in stale[0][2]
        assert "since prefill-0 restarted" in stale[0][2]
        assert h.backend.pid("decode-0") != first_decode

    run(scenario())
