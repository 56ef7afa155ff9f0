"""Store write -> websocket: seconds from sending a PUT that stores a revision to its
`deployment.updated` event arriving on the deployment's live socket, on this tree and,
with `--baseline REF`, on a checkout of REF (a temporary git worktree, removed after) in the
same run, printed as a ratio. REF 3696758 is the last commit whose observer polled SQLite
for events every scrape interval (1 s); since state/, the store publishes each event as it
commits. Run: `make bench-events` or `.venv/bin/python -m benchmarks.bench_events`."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from websockets.sync.client import connect

from harness.processes import free_port, http_get, port_range

ROOT = Path(__file__).resolve().parent.parent
SPEC = {
    "name": "ev",
    "engine": "sim",
    "model": "tiny",
    "topology": "colocated",
    "groups": [{"name": "main", "role": "colocated", "count": 1}],
}


def request(base: str, method: str, path: str, body: dict) -> int:
    import urllib.request

    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


@contextmanager
def serve(tree: Path, tmp: Path):
    """`pdctl serve` of `tree` (its own code first on the path), until healthy."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "PDCTL_RUNTIME_DIR": str(tmp / "runs"),
        "PDCTL_PORT_RANGE": port_range(),
    }
    argv = [sys.executable, str(tree / "pdctl.py"), "serve", "--port", str(port)]
    with open(tmp / "serve.log", "wb") as log:
        proc = subprocess.Popen(
            [*argv, "--db", str(tmp / "pdctl.db")],
            cwd=tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http_get(base + "/health", timeout=1.0)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp / "serve.log").read_text()[-2000:])
            time.sleep(0.05)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def lags(tree: Path, trials: int) -> tuple[list[float], list[float]]:
    """Seconds from sending each PUT to its event on the socket, and to its answer."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-events-") as folder,
        serve(tree, Path(folder)) as base,
    ):
        assert request(base, "POST", "/api/deployments", SPEC) == 201
        out, answered = [], []
        with connect(base.replace("http", "ws") + "/ws/deployments/ev") as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "history"
            for i in range(trials):
                time.sleep(random.uniform(0.05, 0.4))  # every phase of a polling tick
                body = {**SPEC, "slo": {"ttft_ms": 2000 + i}}
                sent = time.monotonic()
                assert request(base, "PUT", "/api/deployments/ev", body) == 200
                answered.append(time.monotonic() - sent)
                while True:
                    message = json.loads(ws.recv(timeout=10))
                    if message.get("kind") == "deployment.updated":
                        break
                out.append(time.monotonic() - sent)
        return out, answered


@contextmanager
def worktree(ref: str):
    path = Path(tempfile.mkdtemp(prefix="pdctl-baseline-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), ref], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=True
        )
        path.parent.rmdir()


def summary(label: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p90 = statistics.quantiles(ms, n=10)[-1]
    return (
        f"{label}: median {statistics.median(ms):.1f} ms, p90 {p90:.1f} ms, "
        f"max {ms[-1]:.1f} ms over {len(ms)} writes"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a git ref to measure in the same run")
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    now, answered = lags(ROOT, args.trials)
    print(summary("store write -> websocket event, this tree", now))
    print(summary("  (the PUT's own answer, for scale)", answered))
    if args.baseline:
        with worktree(args.baseline) as tree:
            before, answered = lags(tree, args.trials)
        print(summary(f"store write -> websocket event, {args.baseline}", before))
        print(summary("  (the PUT's own answer, for scale)", answered))
        ratio = statistics.median(before) / statistics.median(now)
        print(f"median ratio {args.baseline} / this tree: {ratio:.0f}x")


if __name__ == "__main__":
    main()
