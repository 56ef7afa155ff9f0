"""`make bench-plan-live`: does `pdctl plan` predict what live stand-ins do?

The same workload (seeded prompts and Poisson arrivals) goes through a live NIXL 1P1D of
stand-ins behind `pdctl proxy` (slowed K times with --time-scale so this machine keeps up,
SLO targets scaled by K) and through the planner's virtual clock. Printed per rate: the
slo_attainment of each and their difference in percentage points (the issue asks for 10 or
fewer).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from domain.measures.slo import SloTargets
from harness.processes import running
from harness.stack import bench, nixl_sim, proxy
from simulator.plan.planner import EngineFlags, PlanSetup, Workload, parse_config, run

MODEL, HARDWARE = "llama-3.1-8b", "l40s"
TIME_SCALE = 2.0
SLO_TTFT_MS, SLO_ITL_MS = 300.0, 40.0
PROMPTS, INPUT, OUTPUT = 40, 1000, 64
RATES = (2.0, 6.0, 12.0)


def live(tmp: Path, rate: float) -> float:
    flags = (
        "--model-profile",
        MODEL,
        "--hardware",
        HARDWARE,
        "--time-scale",
        str(TIME_SCALE),
        "--no-enable-prefix-caching",
    )
    prefill = nixl_sim(tmp, f"p{rate}", "kv_producer", *flags)
    decode = nixl_sim(tmp, f"d{rate}", "kv_consumer", *flags)
    front = proxy(
        tmp,
        f"proxy{rate}",
        "--prefill",
        f"http://127.0.0.1:{prefill.port}",
        "--decode",
        f"http://127.0.0.1:{decode.port}",
    )
    with running(prefill, decode, front):
        # Arrivals, prompts and targets on the live clock: K times slower than modelled.
        result = bench(
            tmp,
            front.url,
            "--request-rate",
            str(rate / TIME_SCALE),
            "--num-prompts",
            str(PROMPTS),
            "--input-len",
            str(INPUT),
            "--output-len",
            str(OUTPUT),
            "--slo-ttft-ms",
            str(SLO_TTFT_MS * TIME_SCALE),
            "--slo-itl-ms",
            str(SLO_ITL_MS * TIME_SCALE),
            "--itl-slo-stat",
            "p99",
            "--seed",
            "0",
            "--model",
            MODEL,
            name=f"live{rate}",
            timeout=600,
        )
    return result["slo_attainment"]


def planned(rate: float) -> float:
    flags = EngineFlags(256, 8192, False)
    setup = PlanSetup(
        MODEL, HARDWARE, 2, flags, flags, flags, slo=SloTargets(SLO_TTFT_MS, SLO_ITL_MS)
    )
    row = run(
        setup, parse_config("1p-tp1+1d-tp1:read"), Workload(PROMPTS, INPUT, OUTPUT, seed=0), rate
    )
    return row["slo_attainment"]


def main() -> None:
    print(
        f"{MODEL} on {HARDWARE}, NIXL 1P1D read, {PROMPTS} x {INPUT} in / {OUTPUT} out, "
        f"SLO TTFT {SLO_TTFT_MS:g} ms, ITL p99 {SLO_ITL_MS:g} ms; live at time scale "
        f"{TIME_SCALE:g}"
    )
    print(f"{'rate':>6}{'plan':>8}{'live':>8}{'diff pp':>9}")
    with tempfile.TemporaryDirectory() as folder:
        for rate in RATES:
            plan, got = planned(rate), live(Path(folder), rate)
            print(f"{rate:>6g}{plan:>8.0%}{got:>8.0%}{(got - plan) * 100:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
