"""The control plane's correctness canary as the proxy sees it: which requests are canaries.

A canary carries `X-Pdctl-Canary: <the proxy's admin token>` (controller/clients/proxy_admin.py
knows
it). The proxy serves it as any request but leaves it out of what it measures for the SLO
figures (attainment, goodput, TTFT/ITL histograms, arrival gaps, turn kinds, ITL spikes) and
names the pair that served it in the answer's headers (a whole answer: the canary asks for
one). Why the token: a client that could mark its own requests as canaries would hide them
from the SLO figures. A header with any other value, or at a proxy without an admin token,
is "forged": that request is served and measured like any other, and counted as forged.

A canary may also name the pair that must serve it (`X-Pdctl-Pair`): the control plane checks
one hand-off path that way, after a prefill restarted, whatever the routing would pick. Only a
canary may: anyone else would steer traffic past the routing policy and the ejections.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from connector.errors import BadRequest, NotFound, Unauthorized, Unavailable
from connector.pool.instances import InstancePool, Route
from domain.canary_marks import DECODE_HEADER, HEADER, PAIR_HEADER, PREFILL_HEADER
from domain.modes import Role

__all__ = [
    "DECODE_HEADER",
    "HEADER",
    "PAIR_HEADER",
    "PREFILL_HEADER",
    "mark",
    "pair_headers",
    "pinned_route",
]


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


def pinned_route(
    headers: Mapping[str, str], marked: str | None, pool: InstancePool
) -> Route | None:
    """The pair a canary names in `X-Pdctl-Pair`, or None when it names none. Refused (a
    clear 4xx naming the header) when the request is no canary or the pair is not one."""
    value = headers.get(PAIR_HEADER)
    if value is None:
        return None
    if marked != "canary":
        raise Unauthorized(
            f"{PAIR_HEADER} is the control plane's: it needs {HEADER} with the proxy's admin token"
        )
    urls = value.split()
    if len(urls) != 2:
        raise BadRequest(
            f"{PAIR_HEADER} must be '<prefill url> <decode url>', got {value!r}", PAIR_HEADER
        )
    prefill, decode = (pool.get(u) for u in urls)
    for url, inst, role in ((urls[0], prefill, Role.PREFILL), (urls[1], decode, Role.DECODE)):
        if inst is None or inst.role != role:
            raise NotFound(f"{PAIR_HEADER}: no {role} instance {url} is registered")
    assert prefill is not None and decode is not None
    if prefill.mode != decode.mode:
        raise BadRequest(
            f"{PAIR_HEADER}: {prefill.url} serves {prefill.mode} and {decode.url} "
            f"{decode.mode}: not one pair",
            PAIR_HEADER,
        )
    if pool.groups[prefill.mode].paused:
        raise Unavailable(f"{PAIR_HEADER}: group {prefill.mode} is paused (a mode switch)")
    return Route(prefill.mode, prefill, decode)
