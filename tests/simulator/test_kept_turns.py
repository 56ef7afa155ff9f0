"""A decode's blocks kept for a conversation's next turn (bidirectional KV) in the scheduler:
held for their lease, then freed; freed first, oldest first, when a request needs the room."""

from simulator.engine.request import KVRole, RequestStatus
from simulator.engine.virtual_clock import run_engine
from tests.simulator.factories import request, scheduler


def kept(rid: str, prompt_len: int, lease: float = 60.0):
    req = request(rid, prompt_len, 4, role=KVRole.REMOTE_PREFILL, kv_ready=True)
    req.keep_kv_s = lease
    return req


def test_a_finished_decode_keeps_its_blocks_for_its_lease():
    s = scheduler(num_gpu_blocks=100, block_size=16)
    turn = kept("d", 320, lease=30.0)
    run_engine(s, [turn])
    assert turn.status is RequestStatus.HELD and turn.finish_reason == "length"
    assert turn.kv_hold_deadline == turn.finish_time + 30.0
    assert s.pool.num_free < 100
    assert s.expire_held(turn.finish_time + 29.0) == []
    assert s.expire_held(turn.finish_time + 30.0) == [turn]
    assert s.pool.num_free == 100


def test_a_decode_without_a_lease_frees_its_blocks_at_once():
    s = scheduler(num_gpu_blocks=100, block_size=16)
    turn = request("d", 320, 4, role=KVRole.REMOTE_PREFILL, kv_ready=True)
    run_engine(s, [turn])
    assert turn.status is RequestStatus.FINISHED and s.pool.num_free == 100


def test_kept_turns_give_way_oldest_first_to_a_request_that_needs_the_room():
    s = scheduler(num_gpu_blocks=60, block_size=16, enable_prefix_caching=False)
    old, young = kept("old", 320), kept("young", 320)  # 21 blocks each, 42 of 60
    run_engine(s, [old])
    run_engine(s, [young])
    assert set(s.held) == {"old", "young"}
    newcomer = request("new", 500, 2, at=young.finish_time)  # 32 blocks: one must go
    run_engine(s, [newcomer])
    assert newcomer.num_output_tokens == 2
    assert set(s.held) == {"young"} and old.status is RequestStatus.FINISHED


def test_a_prefill_leg_held_for_its_decode_never_gives_way():
    s = scheduler(num_gpu_blocks=40, block_size=16, enable_prefix_caching=False)
    leg = request("p", 480, 1, role=KVRole.REMOTE_DECODE)  # 30 blocks held for a decode
    run_engine(s, [leg])
    newcomer = request("new", 300, 2, at=leg.finish_time)  # 19 blocks: only 10 free
    run_engine(s, [newcomer], until=leg.finish_time + 1.0)
    assert "p" in s.held and newcomer.num_output_tokens == 0


def test_held_entries_of_turns_that_gave_way_are_swept():
    from types import SimpleNamespace

    from domain import profiles
    from simulator.kv.pullback import keep_for_next_turn
    from simulator.kv.transfer import _Held

    s = scheduler(num_gpu_blocks=1000, block_size=16)
    turn = kept("live", 32)
    run_engine(s, [turn])
    agent = SimpleNamespace(
        _held={f"gone{i}": _Held(f"gone{i}", 1.0, 1, b"") for i in range(100)},
        engine=SimpleNamespace(scheduler=s),
        model=profiles.model("qwen3-235b-a22b-fp8"),
        advertised_host="127.0.0.1",
        kv=SimpleNamespace(kv_port=1),
    )
    params = keep_for_next_turn(agent, turn, "engine-1", 4)
    assert params["remote_request_id"] == "live" and params["remote_num_tokens"] == 32 + 4 - 1
    assert set(agent._held) == {"live"}  # the 100 whose blocks are gone were swept
