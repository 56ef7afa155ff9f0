"""A prefill restart never wedges a decode: the controller restarts a decode whose KV transfers
keep failing after a prefill came back (controller/supervise/stale_peers.py)."""

from controller.clients.health import failed_transfers
from controller.launch.ports import allocate
from controller.supervise.stale_peers import StaleWatch
from tests.controller.factories import tiny_pair
from tests.controller.supervise.test_supervisor import Harness, run


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


def test_a_prefill_restart_seen_before_the_counters_are_read_is_kept_until_they_are():
    watch = StaleWatch(failures=2, window_s=60)
    watch.step({"p": 10}, {"d": (20, 0.0)}, now=0)
    assert watch.step({"p": 11}, {"d": (20, None)}, now=1) == []  # the read timed out
    assert watch.new_process({"p": 11})
    watch.step({"p": 11}, {"d": (20, 1.0)}, now=2)  # read now: counted from here
    assert watch.step({"p": 11}, {"d": (20, 3.0)}, now=3)[0][0] == "d"


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


def test_two_stale_decodes_are_restarted_one_at_a_time_never_a_hung_one(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        groups = [
            {"name": "prefill", "role": "prefill"},
            {"name": "decode", "role": "decode", "count": 3},
        ]
        spec = tiny_pair(groups=groups)
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        port = {d: ports.instances[d].http for d in ("decode-0", "decode-1", "decode-2")}
        for p in port.values():
            h.probe.transfer_failures[p] = 0.0
            h.probe.registered.add(p)  # the proxy lists (and routes to) every decode
        h.probe.down.add(port["decode-2"])  # hung: its probes fail, the health checks' case
        h.backend.crash("prefill-0", -9)
        await h.polls(1, every=0.1)
        await h.polls(3, every=1.0)
        for d in ("decode-0", "decode-1", "decode-2"):
            h.probe.transfer_failures[port[d]] = 5.0
        await h.polls(1, every=1.0)
        restarted = [d for d in port if h.states("tiny-pd")[d] != "RUNNING"]
        stale = [e[2] for e in h.events if e[1] == "stale_peer"]
        assert len(stale) <= 1 and len(restarted) <= 1  # never two at once
        h.probe.down.discard(port["decode-2"])
        await h.polls(12, every=1.0)
        stale = [e[2] for e in h.events if e[1] == "stale_peer"]
        assert {s.split(":")[0] for s in stale} >= {"tiny-pd/decode-0", "tiny-pd/decode-1"}

    run(scenario())


def test_a_pair_check_judges_the_handshake_and_says_nothing_when_it_cannot():
    from controller.clients.pair_check import verdict

    assert verdict("p", 200, "", 0.0, 0.0) == "ok"
    assert verdict("p", 200, "", None, None) == "ok"
    # a connector that recomputes answers 200 through a stale agent: its counter tells
    assert verdict("p", 200, "", 1.0, 2.0).startswith("stale: 1 KV transfer(s) failed")
    failed = "decode leg to http://d failed: no first byte within 1 s"
    stale = verdict("p", 502, failed, 0.0, 0.0, control=200)
    assert stale.startswith("stale: ") and "decode leg to http://d" in stale
    # the same decode failing with another prefill too is busy or broken, not stale
    assert verdict("p", 502, failed, 0.0, 0.0, control=502) is None
    assert verdict("p", 502, failed, 0.0, 0.0) is None  # no other prefill to compare with
    for status, message in (
        (502, "prefill leg to http://p failed: refused"),  # says nothing of the decode
        (503, "no instance"),
        (404, "X-Pdctl-Pair: no decode instance"),
        (None, "no answer"),
    ):
        assert verdict("p", status, message, 0.0, 0.0) is None


def test_a_checked_pair_decides_before_any_traffic_fails():
    watch = StaleWatch(failures=2, window_s=60)
    watch.step({"p": 10}, {"d": (20, 0.0), "e": (30, 0.0)}, now=0)
    watch.step({"p": 11}, {"d": (20, 0.0), "e": (30, 0.0)}, now=1)
    assert sorted(watch.unchecked(1)) == [("p", "d"), ("p", "e")]
    watch.verdicts[("p", "d")] = "stale: a check pinned to the restarted p failed on the decode"
    watch.verdicts[("p", "e")] = "ok"
    (restart,) = watch.step({"p": 11}, {"d": (20, 0.0), "e": (30, 0.0)}, now=2)
    assert restart[0] == "d" and "failed on the decode: its handshake with the old p" in restart[1]
    assert watch.unchecked(2) == []
    watch.acted("d")
    # e checked good: later failures on it are not the old agent's
    assert watch.step({"p": 11}, {"e": (30, 9.0)}, now=3) == []
    # the prefill restarts again: the pairs are checked again
    watch.step({"p": 12}, {"d": (21, 0.0), "e": (30, 9.0)}, now=4)
    assert sorted(watch.unchecked(4)) == [("p", "d"), ("p", "e")]


async def _polls(h, n, every):
    import asyncio

    for _ in range(n):
        await h.polls(1, every=every)
        for _ in range(5):
            await asyncio.sleep(0)  # the pair checks' tasks run


async def _two_by_two(h):
    groups = [
        {"name": "prefill", "role": "prefill", "count": 2},
        {"name": "decode", "role": "decode", "count": 2},
    ]
    spec = tiny_pair(groups=groups)
    ports = allocate(spec)
    await h.sup.start("tiny-pd", spec, ports)
    await h.polls(2)
    port = {u: ports.instances[u].http for u in ports.instances}
    for p in port.values():
        h.probe.registered.add(p)
    for d in ("decode-0", "decode-1"):
        h.probe.transfer_failures[port[d]] = 0.0
    return port


def test_the_supervisor_checks_each_decode_against_the_restarted_prefill(tmp_path):
    """The routing never paired the new prefill-0 with decode-1 (no failure anywhere): its
    pinned check fails on the decode leg while decode-1 serves prefill-1 (the control), and
    it alone is restarted."""

    async def scenario():
        h = Harness(tmp_path)
        port = await _two_by_two(h)
        p0, p1, d0, d1 = (port[u] for u in ("prefill-0", "prefill-1", "decode-0", "decode-1"))
        h.probe.pair_answers[(p0, d0)] = (200, "")
        h.probe.pair_answers[(p0, d1)] = (502, "decode leg to d failed: x")
        h.probe.pair_answers[(p1, d1)] = (200, "")
        first = {d: h.backend.pid(d) for d in ("decode-0", "decode-1")}
        h.backend.crash("prefill-0", -9)
        await _polls(h, 1, 0.1)
        await _polls(h, 8, 1.0)
        assert h.states("tiny-pd")["prefill-0"] == "RUNNING"
        assert set(h.probe.pair_checks) == {(p0, d0), (p0, d1), (p1, d1)}
        stale = [e[2] for e in h.events if e[1] == "stale_peer"]
        assert len(stale) == 1 and stale[0].startswith("tiny-pd/decode-1: restarting")
        assert "pinned to the restarted prefill-0 failed on the decode" in stale[0]
        assert h.backend.pid("decode-0") == first["decode-0"]
        assert h.backend.pid("decode-1") != first["decode-1"]
        assert all(t is not None for t in h.probe.tokens)  # the admin token went along

    run(scenario())


def test_a_decode_failing_with_every_prefill_is_not_restarted_by_the_check(tmp_path):
    """A decode busy past its leg timeout fails the control check too: not stale."""

    async def scenario():
        h = Harness(tmp_path)
        port = await _two_by_two(h)
        p0, p1, d0, d1 = (port[u] for u in ("prefill-0", "prefill-1", "decode-0", "decode-1"))
        busy = (502, "decode leg to d failed: no answer within 4 s")
        h.probe.pair_answers |= {(p0, d0): (200, ""), (p0, d1): busy, (p1, d1): busy}
        first = h.backend.pid("decode-1")
        h.backend.crash("prefill-0", -9)
        await _polls(h, 1, 0.1)
        await _polls(h, 30, 1.0)
        assert [e for e in h.events if e[1] == "stale_peer"] == []
        assert h.backend.pid("decode-1") == first
        assert h.probe.pair_checks.count((p0, d1)) == 4  # tried again, then left alone

    run(scenario())


def test_an_inconclusive_pair_check_is_tried_again_then_left_to_the_failure_counts(tmp_path):
    async def scenario():
        h = Harness(tmp_path)
        spec = tiny_pair()
        ports = allocate(spec)
        await h.sup.start("tiny-pd", spec, ports)
        await h.polls(2)
        decode = ports.instances["decode-0"].http
        h.probe.transfer_failures[decode] = 0.0
        h.probe.registered |= {decode, ports.instances["prefill-0"].http}
        first = h.backend.pid("decode-0")
        h.backend.crash("prefill-0", -9)
        await _polls(h, 1, 0.1)
        await _polls(h, 30, 1.0)
        assert len(h.probe.pair_checks) == 4  # no answer: tried 4 times, 5 s apart
        assert h.backend.pid("decode-0") == first  # nothing said it was stale
        h.probe.transfer_failures[decode] = 2.0  # the traffic's failures still count
        await _polls(h, 3, 1.0)
        assert h.backend.pid("decode-0") != first

    run(scenario())
