"""After a prefill restarts, check at once each running decode's hand-off with it: a canary
pinned to that pair through the proxy (connector/dispatch/canary.py, `X-Pdctl-Pair`). Waiting for
the
traffic to find a stale decode (controller/supervise/stale_peers.py counts its failures) is not
enough:
vLLM's proxies pick the prefill and the decode each in its own turn, so with two of each the
restarted prefill may meet one decode only, until a retry shifts the turns and the other, which
kept the old prefill's agent all along, starts failing requests (the chaos campaign's 2P2D
prefill-restart row found no stale decode at all that way on a fresh machine).

`verdict` is pure; `run` is the shell: the decode's failed KV transfers read before and after
(a connector that recomputes on a failed transfer answers 200 through a stale agent), the
pinned canary between them, and, when its decode leg failed, a control check of the same
decode pinned to another prefill: only a failure with the restarted prefill alone is a stale
handshake (a decode busy past its leg timeout fails both, and must not be restarted for it).
With no other prefill there is no control, and the traffic's failures judge alone.
"""

from __future__ import annotations

from typing import Protocol

from domain.canary_marks import greedy_body

# Longer than a real connector's KV transfer timeout (a stale agent hangs that long) plus a
# short answer on a busy CPU engine.
CHECK_TIMEOUT_S = 90.0
MAX_TOKENS = 2
RETRY_AFTER_S = 5.0  # an inconclusive check (the prefill leg failed, no answer) is tried again
TRIES = 4
PROMPT = "pdctl pair check: one hand-off from this prefill to this decode"


class PairProbe(Protocol):
    async def failed_transfers(self, url: str) -> float | None: ...

    async def pair_check(
        self,
        proxy_url: str,
        token: str | None,
        prefill_url: str,
        decode_url: str,
        body: dict,
        timeout: float,
    ) -> tuple[int | None, str]: ...


def verdict(
    prefill: str,
    status: int | None,
    message: str,
    before: float | None,
    after: float | None,
    control: int | None = None,
) -> str | None:
    """ "ok", "stale: why", or None when the check says nothing about the decode's handshake
    with `prefill` (the prefill leg failed, the proxy refused the pin, no answer). A decode
    leg that failed is stale only when the same decode served a control check pinned to
    another prefill (`control`: its status): a busy or broken decode fails both, and is the
    health checks' to judge, not a restart's."""
    if before is not None and after is not None and after > before:
        return (
            f"stale: {after - before:g} KV transfer(s) failed on a check pinned to the "
            f"restarted {prefill}"
        )
    if status == 200:
        return "ok"
    if status == 502 and "decode leg" in message and control == 200:
        return (
            f"stale: a check pinned to the restarted {prefill} failed on the decode while one "
            f"pinned to another prefill passed: {message}"
        )
    return None


def _failed_on_decode(status: int | None, message: str) -> bool:
    return status == 502 and "decode leg" in message


async def run(
    probe: PairProbe,
    proxy_url: str,
    token: str | None,
    model: str,
    prefill: tuple[str, str],
    decode_url: str,
    control_url: str | None = None,
) -> str | None:
    """Check the hand-off of `prefill` (name, url) to the decode at `decode_url`; when its
    decode leg fails, check the same decode with the prefill at `control_url`."""
    name, prefill_url = prefill
    body = greedy_body(model, PROMPT, MAX_TOKENS)
    before = await probe.failed_transfers(decode_url)
    status, message = await probe.pair_check(
        proxy_url, token, prefill_url, decode_url, body, CHECK_TIMEOUT_S
    )
    after = await probe.failed_transfers(decode_url)
    control = None
    if _failed_on_decode(status, message) and control_url is not None:
        control, _ = await probe.pair_check(
            proxy_url, token, control_url, decode_url, body, CHECK_TIMEOUT_S
        )
    return verdict(name, status, message, before, after, control)
