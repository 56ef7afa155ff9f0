"""The engine core's latency physics on the virtual clock (issue 2, "Must show")."""

import statistics

from simulator.engine.request import KVRole, RequestStatus
from simulator.engine.virtual_clock import run_engine
from tests.simulator.factories import poisson, request, scheduler


def _background_and_long_prompts(role: KVRole, kv_ready: bool):
    # 24 streams decoding 600 tokens; an 8k-token prompt arrives every 2 s among them.
    background = [
        request(f"bg{i}", 500, 600, at=0.01 * i, role=role, kv_ready=kv_ready) for i in range(24)
    ]
    long = [
        request(f"long{i}", 8000, 20, at=1.0 + 2.0 * i, role=role, kv_ready=kv_ready)
        for i in range(6)
    ]
    return background, long


def _p99_over_median(reqs):
    ratios = [r.itl_stat("p99") / r.itl_stat("p50") for r in reqs]
    return statistics.median(ratios)


def test_colocated_long_prefills_spike_itl_but_decode_only_stays_flat():
    colocated = scheduler(enable_prefix_caching=False)
    background, long = _background_and_long_prompts(KVRole.LOCAL, False)
    run_engine(colocated, background + long)
    assert all(r.num_output_tokens == 600 for r in background)
    assert _p99_over_median(background) >= 3.0

    decode = scheduler(enable_prefix_caching=False)
    background, long = _background_and_long_prompts(KVRole.REMOTE_PREFILL, True)
    run_engine(decode, background + long)
    assert all(r.num_output_tokens == 600 for r in background)
    assert _p99_over_median(background) < 1.5


def test_low_load_ttft_grows_linearly_with_prompt_length():
    lengths = [1000, 2000, 4000, 8000]
    ttfts = []
    for n in lengths:
        s = scheduler(enable_prefix_caching=False)
        r = request("one", n, 4)
        run_engine(s, [r])
        ttfts.append(r.ttft())
    per_token = [
        (b - a) / (n2 - n1)
        for a, b, n1, n2 in zip(ttfts, ttfts[1:], lengths, lengths[1:], strict=False)
    ]
    assert all(t > 0 for t in per_token)
    assert max(per_token) / min(per_token) < 1.3  # about linear (attention adds a little)


def test_full_kv_pool_makes_requests_wait_and_preempts():
    # 40 blocks of 16 tokens: three 200-token prompts fit, their decodes outgrow the pool.
    s = scheduler(
        model="llama-3.1-8b", hardware="h100", tp=1, num_gpu_blocks=40, enable_prefix_caching=False
    )
    reqs = [request(f"r{i}", 200, 300, at=0.0) for i in range(5)]
    for r in reqs:
        s.add_request(r)
    out = s.step(0.0)
    assert len(out.tokens) == 3 and s.num_waiting == 2  # two wait for blocks
    now = out.end
    while s.has_work:
        now = s.step(now).end
    assert s.counters.preemptions > 0
    assert all(r.num_output_tokens == 300 and r.finish_reason == "length" for r in reqs)
    assert max(r.preemptions for r in reqs) > 0


def test_prefix_caching_cuts_ttft_of_a_shared_prefix_and_not_when_off():
    shared = request("x", 4096, 1, seed=7).prompt_token_ids

    def second_ttft(caching: bool) -> float:
        s = scheduler(enable_prefix_caching=caching)
        first = request("a", 0, 4, at=0.0, ids=[*shared, 1, 2, 3])
        second = request("b", 0, 4, at=5.0, ids=[*shared, 4, 5, 6])
        run_engine(s, [first, second])
        return second.ttft(), first.ttft(), s

    cached, first_cached, s = second_ttft(True)
    uncached, first_uncached, s_off = second_ttft(False)
    assert cached < 0.25 * first_cached
    assert uncached > 0.9 * first_uncached
    assert s.counters.prefix_cache_hits == 4096
    assert s_off.counters.prefix_cache_hits == 0


def test_prefill_role_holds_blocks_until_released_or_expired():
    s = scheduler(kv_hold_timeout_s=10.0)
    leg = request("p", 1000, 1, role=KVRole.REMOTE_DECODE)
    run_engine(s, [leg])
    assert leg.status is RequestStatus.HELD and leg.num_output_tokens == 1
    assert s.pool.num_free < s.pool.num_blocks
    assert s.expire_held(leg.first_token_time + 5.0) == []
    assert [r.request_id for r in s.expire_held(leg.first_token_time + 10.0)] == ["p"]
    assert s.pool.num_free == s.pool.num_blocks
    assert s.counters.kv_expired_requests == 1


def test_decode_role_waits_for_kv_then_computes_only_the_last_token():
    s = scheduler()
    leg = request("d", 4000, 5, role=KVRole.REMOTE_PREFILL)
    s.add_request(leg)
    out = s.step(0.0)
    assert out.awaiting_kv == [leg] and leg.status is RequestStatus.WAITING_FOR_KV
    assert not s.has_work  # nothing to compute until the KV lands
    s.kv_arrived("d", ok=True, recompute_on_failure=False)
    out = s.step(1.0)
    assert out.batch.prefill_tokens == 0 and out.batch.decode_seqs == 1
    assert leg.first_token_time == out.end
    assert s.counters.prompt_tokens_external == 3999


def test_failed_transfer_recomputes_or_fails_per_policy():
    s = scheduler()
    for rid in ("recompute", "fail"):
        s.add_request(request(rid, 3000, 3, role=KVRole.REMOTE_PREFILL))
    s.step(0.0)
    s.kv_arrived("recompute", ok=False, recompute_on_failure=True)
    s.kv_arrived("fail", ok=False, recompute_on_failure=False)
    out = s.step(1.0)
    assert out.batch.prefill_tokens == 3000  # the whole prompt, computed locally
    assert s.requests["fail"].finish_reason == "error"


def test_abort_frees_blocks():
    s = scheduler()
    r = request("a", 1000, 100)
    s.add_request(r)
    s.step(0.0)
    s.abort("a", 1.0)
    assert r.finish_reason == "abort" and s.pool.num_free == s.pool.num_blocks


def test_max_num_seqs_caps_the_batch():
    s = scheduler(max_num_seqs=4)
    for i in range(10):
        s.add_request(request(f"r{i}", 100, 50))
    out = s.step(0.0)
    assert len(out.tokens) == 4 and s.num_waiting == 6


def test_chunked_prefill_splits_a_long_prompt_by_the_token_budget():
    s = scheduler(max_num_batched_tokens=2048)
    r = request("long", 5000, 2)
    s.add_request(r)
    chunks = []
    now = 0.0
    while r.first_token_time is None:
        out = s.step(now)
        chunks.append(out.batch.prefill_tokens)
        now = out.end
    assert chunks == [2048, 2048, 904]


def test_jumping_matches_stepping_one_by_one():
    def run(jump: bool):
        s = scheduler(enable_prefix_caching=False)
        reqs = poisson(20, 4.0, 1000, 200, seed=3)
        if jump:
            run_engine(s, reqs)
        else:
            pending, now = sorted(reqs, key=lambda r: r.arrival_time), 0.0
            while pending or s.has_work:
                while pending and pending[0].arrival_time <= now:
                    s.add_request(pending.pop(0))
                if not s.has_work:
                    now = pending[0].arrival_time
                    continue
                now = s.step(now).end
        return reqs, s.counters.steps

    jumped, jumped_steps = run(True)
    stepped, stepped_steps = run(False)
    assert jumped_steps == stepped_steps
    for a, b in zip(jumped, stepped, strict=True):
        assert abs(a.ttft() - b.ttft()) < 1e-6
        assert abs(a.finish_time - b.finish_time) < 1e-3 * b.finish_time
        assert abs(a.itl_stat("p99") - b.itl_stat("p99")) < 0.01 * b.itl_stat("p99")
