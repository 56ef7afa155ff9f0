"""`make bench-switch`: read/write switches in a row under load, per strategy, twice.

A real `pdctl serve` runs stand-in MoRIIO deployments: 1P1D for hold and keep-serving, 2P2D
(two pairs) for roll. First the tiny model starting at once: `pdctl bench` offers 10 req/s of
512-token prompts with 256 output tokens while ten switches run back to back. Then the MORI-IO
setup (Qwen3-235B-A22B-FP8, TP4 instances on MI300X) with modelled start times
(domain/engine/start_time.py, a warm restart ~2 min) scaled by START_SCALE, and the proxy's 30 s
hold
deadline scaled alike, so that a hold longer than the deadline shows its 503s in minutes.
Printed per strategy: requests sent, completed, failed, lost (no answer at all), rejected
(503), the switch times, the TTFT of requests that arrived during a switch against those that
did not (the baseline, measured in the same run), and the forecast switch duration (the API's,
asked before each switch) against the measured one.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.control_plane import api, stop_and_wait, wait_running
from harness.processes import ROOT, Process, free_port

START_SCALE = 0.1  # of the modelled start; the hold deadline is scaled alike
REAL_HOLD_DEADLINE_S = 30.0


@dataclass(frozen=True)
class Setup:
    label: str
    switches: int = 10
    rate: float = 10.0
    input_len: int = 512
    output_len: int = 256
    spec: dict = field(default_factory=dict)  # over the tiny deployment's fields
    tp: int = 1


TINY = Setup(
    "stand-in MoRIIO tiny model, instant starts",
    spec={"proxy": {"hold_queue": 512, "hold_deadline_s": 60}},
)
MORI_IO = Setup(
    f"MORI-IO setup (Qwen3-235B-A22B-FP8, TP4 on MI300X), modelled starts x {START_SCALE:g}",
    switches=3,
    rate=4.0,
    output_len=64,
    tp=4,
    spec={
        "model": "qwen3-235b-a22b-fp8",
        "hardware": "mi300x",
        "start_time_scale": START_SCALE,
        "proxy": {"hold_queue": 512, "hold_deadline_s": REAL_HOLD_DEADLINE_S * START_SCALE},
    },
)


def deployment(name: str, pairs: int, setup: Setup = TINY) -> dict:
    groups = []
    for i in range(pairs):
        groups += [
            {"name": f"prefill-{i}", "role": "prefill", "mode": "read", "tp": setup.tp},
            {"name": f"decode-{i}", "role": "decode", "mode": "read", "tp": setup.tp},
        ]
    return {
        "name": name,
        "engine": "sim",
        "model": "tiny",
        "topology": "disaggregated",
        "connector": "MoRIIOConnector",
        "prefix_caching": False,
        "groups": groups,
        **setup.spec,
    }


def run_strategy(base: str, tmp: Path, strategy: str, pairs: int, setup: Setup = TINY) -> dict:
    name = f"sw-{strategy}-{setup.tp}"
    status, created = api(base, "POST", "/deployments", deployment(name, pairs, setup))
    assert status == 201, created
    api(base, "POST", f"/deployments/{name}/start")
    wait_running(base, name, timeout=300)
    proxy = f"http://127.0.0.1:{created['ports']['proxy']}"
    out = tmp / f"{name}.json"
    # Enough load to outlast the switches on a busy 2-core machine.
    per_switch = 14 if setup is TINY else 40
    prompts = int(setup.rate * (setup.switches * per_switch + 20))
    load = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "pdctl.py"),
            "bench",
            "--base-url",
            proxy,
            "--request-rate",
            str(setup.rate),
            "--num-prompts",
            str(prompts),
            "--input-len",
            str(setup.input_len),
            "--output-len",
            str(setup.output_len),
            "--result-json",
            str(out),
            "--save-requests",
            "--quiet",
            "--timeout",
            "120",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.time()
    time.sleep(3)
    windows, records, predicted = [], [], []
    for i in range(setup.switches):
        if load.poll() is not None:
            break
        mode = "write" if i % 2 == 0 else "read"
        _, told = api(
            base, "GET", f"/deployments/{name}/switch/forecast?mode={mode}&rate={setup.rate:g}"
        )
        predicted.append(next(f for f in told["strategies"] if f["strategy"] == strategy))
        begin = time.time()
        status, rec = api(
            base,
            "POST",
            f"/deployments/{name}/switch",
            {"mode": mode, "strategy": strategy, "reason": "bench"},
        )
        assert status == 202, rec
        while rec["state"] == "running":
            time.sleep(0.1)
            _, rec = api(base, "GET", f"/deployments/{name}/switches/{rec['id']}")
        windows.append((begin - started, time.time() - started))
        records.append(rec)
    load.wait(timeout=900)
    result = json.loads(out.read_text())
    stop_and_wait(base, name)
    return summarize(strategy, result, records, windows, predicted)


def summarize(
    strategy: str,
    result: dict,
    records: list[dict],
    windows: list[tuple[float, float]],
    predicted: list[dict] | None = None,
) -> dict:
    during: list[float] = []
    outside: list[float] = []
    lost = rejected = 0
    for r in result.get("requests", []):
        error = r.get("error") or ""
        if "503" in error:
            rejected += 1
        if not r.get("ok") and ("timeout" in error.lower() or "disconnected" in error.lower()):
            lost += 1
        if not r.get("ok"):
            continue
        start = r.get("start", 0.0)
        inside = any(a <= start <= b for a, b in windows)
        (during if inside else outside).append(r["ttft"] * 1000)
    took = [r["ended_at"] - r["started_at"] for r in records if r.get("ended_at")]
    return {
        "strategy": strategy,
        "switches": len(records),
        "switches_done": sum(r["state"] == "done" for r in records),
        "sent": result["completed"] + result["failed"],
        "completed": result["completed"],
        "failed": result["failed"],
        "lost": lost,
        "rejected": rejected,
        "switch_s_median": statistics.median(took) if took else None,
        "switch_s_max": max(took) if took else None,
        "held_s_median": _median([r.get("held_s") for r in records]),
        "degraded_s_median": _median([r.get("degraded_s") for r in records]),
        "predicted_s_median": _median([p.get("duration_s") for p in predicted or []]),
        "predicted_held_s": _median([p.get("held_s") for p in predicted or []]),
        "predicted_whole_s": _median([p.get("degraded_s") for p in predicted or []]),
        "predicted_warnings": sorted({w for p in predicted or [] for w in p["warnings"]}),
        "ttft_ms_outside": _median(outside),
        "ttft_ms_during": _median(during),
        "requests_during": len(during),
    }


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        port = free_port()
        serve = Process(
            ["serve", "--port", str(port), "--db", str(tmp / "pdctl.db")],
            port,
            env={"PDCTL_RUNTIME_DIR": str(tmp / "runs")},
            log_path=tmp / "serve.log",
        ).wait_healthy(30)
        tables = []
        try:
            for setup in chosen(sys.argv[1:]):
                rows = []
                for strategy, pairs in (("hold", 1), ("keep-serving", 1), ("roll", 2)):
                    rows.append(run_strategy(serve.url, tmp, strategy, pairs, setup))
                    print(json.dumps(rows[-1]), flush=True)
                tables.append((setup, rows))
        finally:
            serve.stop()
    for setup, rows in tables:
        print_table(setup, rows)


def print_table(setup: Setup, rows: list[dict]) -> None:
    print()
    print(
        f"{setup.switches} switches per strategy under {setup.rate:g} req/s "
        f"({setup.input_len} in / {setup.output_len} out), {setup.label}"
    )
    header = (
        "strategy",
        "sent",
        "done",
        "failed",
        "lost",
        "503",
        "switch s p50/max",
        "forecast s",
        "forecast/measured",
        "held s",
        "whole s",
        "TTFT ms outside/during",
        "x baseline",
    )
    print(" | ".join(header))
    for r in rows:
        base, during = r["ttft_ms_outside"], r["ttft_ms_during"]
        ratio = f"{during / base:.2f}" if base and during else "-"
        took, told = r["switch_s_median"], r["predicted_s_median"]
        print(
            " | ".join(
                str(x)
                for x in (
                    r["strategy"],
                    r["sent"],
                    r["completed"],
                    r["failed"],
                    r["lost"],
                    r["rejected"],
                    f"{took:.2f}/{r['switch_s_max']:.2f}" if took else "-",
                    told,
                    f"{told / took:.2f}" if took and told else "-",
                    r["held_s_median"],
                    r["degraded_s_median"],
                    f"{base}/{during}",
                    ratio,
                )
            )
        )
    for r in rows:
        for warning in r["predicted_warnings"]:
            print(f"forecast warned ({r['strategy']}): {warning}")


SETUPS = {"tiny": TINY, "mori-io": MORI_IO}


def chosen(names: list[str]) -> list[Setup]:
    """The setups named on the command line (tiny, mori-io); none named: both."""
    unknown = [n for n in names if n not in SETUPS]
    if unknown:
        sys.exit(f"bench_switch: unknown setup {unknown[0]!r}; known: {', '.join(SETUPS)}")
    return [SETUPS[n] for n in names] if names else list(SETUPS.values())


if __name__ == "__main__":
    main()
