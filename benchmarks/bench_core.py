"""`make bench-core`: how fast the engine core runs on the virtual clock.

Workload: 100 requests of 2,000 in / 1,000 out, Poisson at 8 req/s, Qwen3-235B-A22B-FP8 on
MI300X TP4 (colocated, and a decode-only instance). The baseline, measured in the same
run, is the same scheduler stepped one step at a time (no jumping over steady stretches).
Also prints the model's step time, TTFT and ITL at batch sizes 1, 32, 64 and 128.
"""

from __future__ import annotations

import random
import statistics
import time

from domain import profiles
from simulator.engine.request import EngineRequest, KVRole
from simulator.engine.scheduler import Scheduler, SchedulerConfig
from simulator.engine.virtual_clock import run_engine
from simulator.model.timing import TimingModel

MODEL, HARDWARE, TP = "qwen3-235b-a22b-fp8", "mi300x", 4


def _timing() -> TimingModel:
    return TimingModel(profiles.model(MODEL), profiles.hardware(HARDWARE), TP)


def _workload(n: int, rate: float, role: KVRole, seed: int = 0) -> list[EngineRequest]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate) if rate != float("inf") else 0.0
        ids = [rng.randrange(4096) for _ in range(2000)]
        ready = role is KVRole.REMOTE_PREFILL
        out.append(EngineRequest(f"r{i}", ids, 1000, t, kv_role=role, kv_ready=ready))
    return out


def _step_by_step(s: Scheduler, reqs: list[EngineRequest]) -> None:
    pending, now = sorted(reqs, key=lambda r: r.arrival_time), 0.0
    i = 0
    while i < len(pending) or s.has_work:
        while i < len(pending) and pending[i].arrival_time <= now:
            s.add_request(pending[i])
            i += 1
        if not s.has_work:
            now = pending[i].arrival_time
            continue
        now = s.step(now).end


def _measure(role: KVRole, jump: bool, repeats: int = 3) -> tuple[float, int, float]:
    config = SchedulerConfig(enable_prefix_caching=False)
    if role is KVRole.REMOTE_PREFILL:  # the blog's decode instance flags
        config = SchedulerConfig(
            max_num_seqs=64, max_num_batched_tokens=4096, enable_prefix_caching=False
        )
    best = float("inf")
    steps = 0
    virtual = 0.0
    for _ in range(repeats):
        s = Scheduler(_timing(), config)
        reqs = _workload(100, 8.0, role)
        start = time.perf_counter()
        if jump:
            virtual = run_engine(s, reqs)
        else:
            _step_by_step(s, reqs)
        best = min(best, time.perf_counter() - start)
        steps = s.counters.steps
    return best, steps, virtual


def batch_table() -> list[tuple[int, float, float, float, float]]:
    rows = []
    t = _timing()
    for batch in (1, 32, 64, 128):
        s = Scheduler(t, SchedulerConfig(enable_prefix_caching=False))
        reqs = _workload(batch, float("inf"), KVRole.LOCAL, seed=batch)
        run_engine(s, reqs)
        step_ms = t.decode_step_seconds(batch, batch * 2500) * 1000
        ttft = [r.ttft() * 1000 for r in reqs]  # type: ignore[operator]  # run_engine ends each
        itl = [r.itl_stat("p50") * 1000 for r in reqs]  # type: ignore[operator]  # as ttft
        rows.append((batch, step_ms, statistics.median(ttft), max(ttft), statistics.median(itl)))
    return rows


def main() -> None:
    print(
        f"engine core on the virtual clock: {MODEL} on {HARDWARE} TP{TP}, "
        "100 requests 2000 in / 1000 out at 8 req/s"
    )
    print(
        f"{'instance':<12}{'mode':<16}{'wall s':>9}{'steps':>8}{'req/s':>10}"
        f"{'steps/s':>11}{'virtual s':>11}{'x baseline':>12}"
    )
    for role, name in ((KVRole.LOCAL, "colocated"), (KVRole.REMOTE_PREFILL, "decode-only")):
        base_wall, base_steps, _ = _measure(role, jump=False)
        wall, steps, virtual = _measure(role, jump=True)
        for mode, w, st in (("step-by-step", base_wall, base_steps), ("jumping", wall, steps)):
            print(
                f"{name:<12}{mode:<16}{w:>9.4f}{st:>8}{100 / w:>10.0f}{st / w:>11.0f}"
                f"{virtual:>11.1f}{base_wall / w:>12.2f}"
            )
    print()
    print("model figures, all requests arriving at once (2000 in / 1000 out):")
    print(
        f"{'batch':>6}{'decode step ms':>16}{'TTFT p50 ms':>13}{'TTFT max ms':>13}"
        f"{'ITL p50 ms':>12}"
    )
    for batch, step_ms, ttft50, ttftmax, itl in batch_table():
        print(f"{batch:>6}{step_ms:>16.1f}{ttft50:>13.0f}{ttftmax:>13.0f}{itl:>12.1f}")


if __name__ == "__main__":
    main()
