"""`make bench-autopilot`: the P:D ratio autopilot on a 2P2D role-switch stand-in deployment
(Qwen3-235B-A22B-FP8 TP4 on MI300X, slowed by --time-scale) under a workload that shifts from
long prompts and short answers (phase A: TTFT-bound) to short prompts and long answers
(phase B: ITL-bound). A real `pdctl serve` runs the autopilot (1-minute window); `pdctl bench`
offers each phase's load. The same load runs first with the autopilot in dry run (the fixed
2P2D, the baseline: what the moves are worth, measured in the same run; --no-baseline skips
it), then live. Printed: SLO attainment per minute (by arrival, judged as the proxy judges),
live and the baseline's beside it, each autopilot move and when (seconds from the start, and
from the shift) and what the dry run would have done, requests sent, completed and lost
(0 expected). Bounded: 8 min of load per run.

    python -m benchmarks.autopilot [--phase-a-s 180] [--phase-b-s 300] [--no-baseline]
                                   [--phase-a RATE,IN,OUT] [--phase-b RATE,IN,OUT]
                                   [--json out.json]

Measured 2026-12-04 on 2 cores, leading from the arrivals (controller/autopilot/demand.py),
SLO attainment live / dry-run baseline: default load (shift at 180 s) phase A 76% / 28%, phase
B 90% / 85%, all 85% / 66%, moves decode -> prefill at 58 s and back at +28 s; --phase-a
0.9,4500,16 --phase-b 1.0,256,96 --phase-a-s 240 --phase-b-s 240: phase A 97% / 30%, phase B
91% / 97%, all 94% / 65%, moves at 54 s and +43 s. 0 lost in every run. With the backlog
signal alone (2026-12-03) the default load gave 28% / 65%: it lost to doing nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from domain.measures.slo import SloTargets, itl_statistic, judge
from harness.control_plane import ControlPlane
from harness.processes import ROOT
from harness.sim_specs import qwen3_2p2d

NAME = "auto"
MODEL = "Qwen/Qwen3-235B-A22B-FP8"
TIME_SCALE = 8.0
# the published SLO x TIME_SCALE
SLO: dict[str, Any] = {"ttft_ms": 8000.0, "itl_ms": 400.0, "itl_stat": "p99"}
# (rate req/s on the wall, input tokens, output tokens). A 6,000-token prefill takes ~3.2 s on
# the wall here: 2 prefills serve ~0.63 req/s, 3 ~0.95. A 128-token answer keeps one of a
# decode's 16 sequences ~25 s: 1 decode serves ~0.65 req/s, 2 ~1.3.
PHASE_A = (0.75, 6000, 8)  # long prompts, short answers: 2P short, 3P enough
PHASE_B = (0.9, 128, 128)  # short prompts, long answers: 1D short, 2D enough


def spec(window_s: float, cooldown_s: float, dry_run: bool = False) -> dict:
    return {
        **qwen3_2p2d(NAME, TIME_SCALE),
        # A request queued behind short decodes waits minutes for its first token: the
        # proxy's 120 s default silence timeout would fail it (a 502, not a lost answer).
        "proxy": {
            "hold_queue": 512,
            "hold_deadline_s": 120,
            "prefill_timeout_s": 900,
            "decode_timeout_s": 900,
        },
        "slo": SLO,
        "role_switch": {},
        "autopilot": {
            "window_s": window_s,
            "cooldown_s": cooldown_s,
            "max_moves_per_hour": 4,
            "dry_run": dry_run,
        },
    }


def bench(proxy: str, tmp: Path, label: str, phase: tuple, seconds: float) -> subprocess.Popen:
    rate, input_len, output_len = phase
    argv = [
        sys.executable,
        str(ROOT / "pdctl.py"),
        "bench",
        "--base-url",
        proxy,
        "--model",
        MODEL,
        "--request-rate",
        str(rate),
        "--num-prompts",
        str(max(1, int(rate * seconds))),
        "--input-len",
        str(input_len),
        "--output-len",
        str(output_len),
        "--slo-ttft-ms",
        str(SLO["ttft_ms"]),
        "--slo-itl-ms",
        str(SLO["itl_ms"]),
        "--timeout",
        "900",
        "--save-requests",
        "--result-json",
        str(tmp / f"{label}.json"),
    ]
    err = (tmp / f"{label}.err").open("w")
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)


def finished(proc: subprocess.Popen, tmp: Path, label: str, timeout: float) -> dict:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    if code != 0:
        raise RuntimeError((tmp / f"{label}.err").read_text()[-2000:])
    return json.loads((tmp / f"{label}.json").read_text())


def per_minute(phases: list[tuple[float, dict]], t0: float, minute_s: float) -> list[dict]:
    """SLO attainment of the requests that arrived in each minute since t0."""
    targets = SloTargets(SLO["ttft_ms"], SLO["itl_ms"], None, SLO["itl_stat"])
    buckets: dict[int, list[bool]] = {}
    for started, result in phases:
        for r in result["requests"]:
            gaps = r.get("itl") or []
            itl = itl_statistic(gaps, targets.itl_stat) if gaps else None
            met = judge(targets, r.get("ttft") if r.get("ok") else None, itl, ok=r.get("ok"))
            minute = int((started + r["start"] - t0) // minute_s)
            buckets.setdefault(minute, []).append(met.met)
    return [
        {"minute": m, "requests": len(v), "slo_attainment": round(sum(v) / len(v), 3)}
        for m, v in sorted(buckets.items())
    ]


def run(
    phase_s: tuple[float, float],
    window_s: float,
    cooldown_s: float,
    dry_run: bool = False,
    shapes: tuple[tuple, tuple] = (PHASE_A, PHASE_B),
) -> dict:
    with tempfile.TemporaryDirectory(prefix="pdctl-autopilot-") as tmp_name:
        tmp = Path(tmp_name)
        plane = ControlPlane(tmp).start()
        loads: list[subprocess.Popen] = []
        try:
            return _run(plane, tmp, loads, phase_s, spec(window_s, cooldown_s, dry_run), shapes)
        finally:
            for load in loads:  # an interrupted run leaves no load running
                if load.poll() is None:
                    load.kill()
                    load.wait()
            code, _ = plane.api("POST", f"/deployments/{NAME}/stop")
            if code == 202:
                plane.wait(NAME, lambda us: all(u["state"] != "RUNNING" for u in us.values()), 60)
            plane.close()


def _run(plane, tmp: Path, loads: list, phase_s: tuple, body: dict, shapes: tuple) -> dict:
    phase_a, phase_b = shapes
    code, created = plane.api("POST", "/deployments", body)
    if code != 201:
        raise RuntimeError(f"create: {code} {created}")
    plane.api("POST", f"/deployments/{NAME}/start")
    plane.running(NAME, timeout=180)
    proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
    t0 = time.time()
    a = bench(proxy, tmp, "a", phase_a, phase_s[0])
    loads.append(a)
    time.sleep(phase_s[0])  # phase A's arrivals end: the shift (its last answers overlap B)
    shift = time.time()
    b = bench(proxy, tmp, "b", phase_b, phase_s[1])
    loads.append(b)
    result_a = finished(a, tmp, "a", 300)
    result_b = finished(b, tmp, "b", phase_s[1] + 300)
    _, events = plane.api("GET", f"/events?deployment={NAME}&limit=500")
    moves = [
        {
            "at_s": round(e["detail"]["ts"] - t0, 1),
            "after_shift_s": round(e["detail"]["ts"] - shift, 1),
            "instance": e["detail"]["instance"],
            "from": e["detail"]["source"],
            "to": e["detail"]["target"],
            "revision": e["detail"].get("revision"),
            "why": e["message"],
        }
        for e in reversed(events)
        if e["kind"] in ("autopilot.move", "autopilot.dry_run")
    ]
    held = [e["message"] for e in reversed(events) if e["kind"] == "autopilot.held"]
    sent = len(result_a["requests"]) + len(result_b["requests"])
    completed = result_a["completed"] + result_b["completed"]
    return {
        "phase_s": list(phase_s),
        "shift_at_s": round(shift - t0, 1),
        "phase_a": {"rate": phase_a[0], "input_len": phase_a[1], "output_len": phase_a[2]},
        "phase_b": {"rate": phase_b[0], "input_len": phase_b[1], "output_len": phase_b[2]},
        "slo_attainment_a": result_a.get("slo_attainment"),
        "slo_attainment_b": result_b.get("slo_attainment"),
        "per_minute": per_minute([(t0, result_a), (shift, result_b)], t0, 60.0),
        "moves": moves,
        "held": held,
        "sent": sent,
        "completed": completed,
        "failed": result_a["failed"] + result_b["failed"],
        "lost": sent - completed,
        "errors": errors([result_a, result_b]),
    }


def phase_shape(text: str) -> tuple[float, int, int]:
    """`RATE,IN,OUT` of --phase-a / --phase-b."""
    try:
        rate, prompt, answer = text.split(",")
        shape = (float(rate), int(prompt), int(answer))
    except ValueError:
        why = f"{text!r}: expected RATE,IN,OUT, e.g. 0.75,6000,8"
        raise argparse.ArgumentTypeError(why) from None
    if not (0 < shape[0] <= 50 and 1 <= shape[1] <= 100_000 and 1 <= shape[2] <= 10_000):
        raise argparse.ArgumentTypeError(f"{text!r}: rate in (0, 50], IN 1-100000, OUT 1-10000")
    return shape


def errors(results: list[dict]) -> dict[str, int]:
    """Failed requests by what went wrong (first 100 characters)."""
    found: dict[str, int] = {}
    for result in results:
        for r in result["requests"]:
            if not r.get("ok"):
                key = (r.get("error") or "no answer")[:100]
                found[key] = found.get(key, 0) + 1
    return found


def side_by_side(live: dict, baseline: dict | None) -> list[str]:
    """Attainment per minute, live and (when run) the dry-run baseline beside it."""
    base = {r["minute"]: r for r in (baseline or {}).get("per_minute", [])}
    lines = []
    for row in live["per_minute"]:
        other = base.get(row["minute"])
        beside = f"; dry run {other['slo_attainment']:.0%} of {other['requests']}" if other else ""
        lines.append(
            f"  minute {row['minute']}: {row['requests']} requests, SLO attainment "
            f"{row['slo_attainment']:.0%}{beside}"
        )
    return lines


def moves_of(report: dict) -> list[str]:
    return [
        f"  {'would move' if report.get('dry_run') else 'move'} at {m['at_s']} s "
        f"({m['after_shift_s']:+} s from the shift): {m['instance']} {m['from']} -> {m['to']}"
        + ("" if report.get("dry_run") else f" (revision {m['revision']})")
        for m in report["moves"]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-a-s", type=float, default=180.0, help="seconds of phase A")
    parser.add_argument("--phase-b-s", type=float, default=300.0, help="seconds of phase B")
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--cooldown-s", type=float, default=60.0)
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the dry-run run (the fixed 2P2D)"
    )
    for name, default in (("a", PHASE_A), ("b", PHASE_B)):
        parser.add_argument(
            f"--phase-{name}",
            type=phase_shape,
            default=default,
            metavar="RATE,IN,OUT",
            help=f"phase {name.upper()}'s load: req/s, prompt and answer tokens "
            f"(default {','.join(str(v) for v in default)})",
        )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    phases = (args.phase_a_s, args.phase_b_s)
    shapes = (args.phase_a, args.phase_b)
    baseline = None
    if not args.no_baseline:  # the same load on the fixed ratio: what the moves are worth
        dry = run(phases, args.window_s, args.cooldown_s, True, shapes)
        baseline = {**dry, "dry_run": True}
    report = run(phases, args.window_s, args.cooldown_s, shapes=shapes)
    print(f"shift at {report['shift_at_s']} s")
    print("\n".join(side_by_side(report, baseline)))
    print("\n".join(moves_of(report)))
    for name, one in (("live", report), ("dry run", baseline)):
        if one is None:
            continue
        print(
            f"{name}: attainment phase A {one['slo_attainment_a']:.0%}, phase B "
            f"{one['slo_attainment_b']:.0%}; sent {one['sent']} completed {one['completed']} "
            f"lost {one['lost']}"
        )
        for error, count in one["errors"].items():
            print(f"  {count} failed: {error}")
    if baseline is not None:
        print("dry run (moves nothing; what it would have done):")
        print("\n".join(moves_of(baseline)) or "  nothing")
    if args.json is not None:
        args.json.write_text(json.dumps({"live": report, "baseline": baseline}, indent=2))


if __name__ == "__main__":
    main()
