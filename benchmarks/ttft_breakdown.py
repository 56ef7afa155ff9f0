"""`make bench-ttft`: where each TTFT went, for 100 requests through a MoRIIO read-mode pair and
a write-mode pair of stand-ins (Llama-3.1-8B on L40S, a modelled KV link of BENCH_TTFT_GBPS
GB/s, default 5) behind `pdctl proxy`, as `pdctl bench` records them: the median and p90 of each
part (queue, retry, prefill, transfer, decode) and of the client's TTFT, in ms. Environment:
BENCH_TTFT_PROMPTS (100), BENCH_TTFT_RATE (8 req/s), BENCH_TTFT_INPUT_LEN (512).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from harness.ttft_pair import PARTS, breakdown, pair, quantiles

PROMPTS = int(os.environ.get("BENCH_TTFT_PROMPTS", "100"))
RATE = float(os.environ.get("BENCH_TTFT_RATE", "8"))
INPUT_LEN = int(os.environ.get("BENCH_TTFT_INPUT_LEN", "512"))
GBPS = float(os.environ.get("BENCH_TTFT_GBPS", "5"))


def main() -> None:
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ttft-") as tmp:
        for mode in ("read", "write"):
            with pair(Path(tmp), mode, GBPS) as front:
                records = breakdown(Path(tmp), front, PROMPTS, RATE, INPUT_LEN, name=mode)
            sources = {r["ttft_parts"]["transfer_source"] for r in records}
            rows[mode] = {"quantiles": quantiles(records), "transfer_source": sorted(sources)}
    print(
        f"{PROMPTS} requests per pair at {RATE:g} req/s, {INPUT_LEN} prompt tokens, "
        f"KV link {GBPS:g} GB/s (ms)"
    )
    columns = (*PARTS, "ttft")
    print(f"{'mode':6} {'':4}" + "".join(f"{c:>10}" for c in columns))
    for mode, row in rows.items():
        for stat in ("p50", "p90"):
            q = row["quantiles"]
            print(f"{mode:6} {stat:4}" + "".join(f"{q[c][stat]:10.2f}" for c in columns))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
