"""The share of prompt tokens a deployment's prefills did not compute because bidirectional
KV pulled them back from a decode (vLLM's prompt_tokens_by_source on prefill instances):
external_kv_transfer over all prompt tokens they saw. A prefill gets KV by transfer only
from a decode's kept turn, so on a prefill this counter is exactly the tokens saved."""

from __future__ import annotations

from collections.abc import Sequence

from observe.metrics.samples import total
from observe.metrics.windows import Delta

BY_SOURCE = "vllm:prompt_tokens_by_source_total"
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def prompt_saved_share(parts: Sequence[tuple[str | None, Delta]]) -> float | None:
    """Over the window, of the prompt tokens prefill instances saw, the share pulled back
    (None: no prefill exports by-source counts, or none saw a prompt)."""
    seen = pulled = 0.0
    found = False
    for role, delta in parts:
        if role != "prefill":
            continue
        counts = {s: total(delta.counts, BY_SOURCE, source=s) for s in SOURCES}
        if all(v is None for v in counts.values()):
            continue
        found = True
        seen += sum(v or 0.0 for v in counts.values())
        pulled += counts["external_kv_transfer"] or 0.0
    return pulled / seen if found and seen > 0 else None
