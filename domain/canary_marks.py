"""The correctness canary's words on the wire, shared by the proxy (connector/dispatch/canary.py)
and
the control plane that sends it (observe/canary/runner.py): the header that marks a canary
(its value: the proxy's admin token), the answer headers that name the pair serving it, and the
header with which the control plane pins a canary to one pair (controller/clients/pair_check.py)."""

HEADER = "X-Pdctl-Canary"
PREFILL_HEADER = "X-Pdctl-Prefill"  # the prefill instance's URL ("" when served whole)
DECODE_HEADER = "X-Pdctl-Decode"  # the decode (or colocated) instance's URL
# "<prefill url> <decode url>": serve this canary on exactly that pair, never retried (a probe
# of one hand-off path must not be healed by the proxy taking another).
PAIR_HEADER = "X-Pdctl-Pair"


def greedy_body(model: str, prompt: str, max_tokens: int) -> dict:
    """A check's request: greedy, fixed length (ignore_eos), one whole (non-streamed) answer."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": False,
    }
