"""One `pdctl bench --workers N` worker process (bench/workers/pool.py starts it): says "ready"
once its imports are done, then runs each job read from stdin and writes back its result,
both as length-prefixed pickles, until stdin closes."""

from __future__ import annotations

import pickle
import sys
from typing import BinaryIO

import uvloop  # noqa: F401 - imported before "ready", not inside a rate's clock

import bench.client  # noqa: F401
from bench.workers.pool import run_share


def reply(out: BinaryIO, message: object) -> None:
    data = pickle.dumps(message)
    out.write(len(data).to_bytes(8, "little") + data)
    out.flush()


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    reply(stdout, "ready")
    while header := stdin.read(8):
        job = pickle.loads(stdin.read(int.from_bytes(header, "little")))
        reply(stdout, run_share(*job))


if __name__ == "__main__":
    main()
