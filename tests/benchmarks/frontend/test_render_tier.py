"""benchmarks/frontend/render_tier.py's pure parts: CPU from a /proc stat line, the report's
figures."""

from __future__ import annotations

import argparse
import os
from types import SimpleNamespace

from benchmarks.frontend.render_tier import cpu_seconds, report
from benchmarks.proxy.procs import CLK_TCK as TICK


def test_cpu_is_utime_plus_stime_of_the_process_itself() -> None:
    me = SimpleNamespace(proc=SimpleNamespace(pid=os.getpid()))
    assert cpu_seconds(me) >= 0
    times = os.times()
    assert abs(cpu_seconds(me) - (times.user + times.system)) < 5 / TICK + 0.05


def test_the_report_gives_per_request_figures_and_the_ratio(capsys) -> None:
    args = argparse.Namespace(input_len=8, output_len=4, concurrency=2, endpoint="chat")
    texts = {0: "a", 1: "b"}
    report(args, texts, [0.02, 0.02, 0.0, 0.01], {0: "a", 1: "c"}, [0.02, 0.02, 0.004, 0.012])
    out = capsys.readouterr().out
    assert "render tier CPU per request:            2.00 ms" in out
    assert "render / engines (same run, with it):   0.100" in out
    assert "completions that differ between the paths: 1 of 2" in out
