"""How a client asks the proxy for its TTFT's parts, and how they come back: one spelling for
the proxy (connector/flight.py) and `pdctl bench` (bench/sse.py)."""

# A request carrying this header gets its parts after its stream's `data: [DONE]`.
PARTS_HEADER = "X-Pdctl-Ttft-Parts"
# ... as one SSE comment line: this prefix, then a JSON object (connector/ttft_parts.py).
PARTS_COMMENT = ": ttft_parts "
