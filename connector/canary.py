"""The control plane's correctness canary as the proxy sees it: which requests are canaries.

A canary carries `X-Pdctl-Canary: <the proxy's admin token>` (controller/proxy_admin.py knows
it). The proxy serves it as any request but leaves it out of what it measures for the SLO
figures (attainment, goodput, TTFT/ITL histograms, arrival gaps, turn kinds, ITL spikes) and
names the pair that served it in the answer's headers (a whole answer: the canary asks for
one). Why the token: a client that could mark its own requests as canaries would hide them
from the SLO figures. A header with any other value, or at a proxy without an admin token,
is "forged": that request is served and measured like any other, and counted as forged.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from domain.canary_marks import DECODE_HEADER, HEADER, PREFILL_HEADER

__all__ = ["DECODE_HEADER", "HEADER", "PREFILL_HEADER", "mark", "pair_headers"]


def mark(headers: Mapping[str, str], admin_token: str | None) -> str | None:
    """ "canary", "forged", or None for a request that claims nothing."""
    given = headers.get(HEADER)
    if given is None:
        return None
    if admin_token and hmac.compare_digest(given.encode(), admin_token.encode()):
        return "canary"
    return "forged"


def pair_headers(prefill: str | None, decode: str | None) -> dict[str, str]:
    return {PREFILL_HEADER: prefill or "", DECODE_HEADER: decode or ""}
