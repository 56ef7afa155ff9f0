"""The correctness canary's words on the wire, shared by the proxy (connector/canary.py) and
the control plane that sends it (observe/canary_probe.py): the header that marks a canary
(its value: the proxy's admin token) and the answer headers that name the pair serving it."""

HEADER = "X-Pdctl-Canary"
PREFILL_HEADER = "X-Pdctl-Prefill"  # the prefill instance's URL ("" when served whole)
DECODE_HEADER = "X-Pdctl-Decode"  # the decode (or colocated) instance's URL
