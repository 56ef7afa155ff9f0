"""The stand-in's KV hand-off: real bytes over TCP between a prefill and a decode, the wire format,
peers, pull-back, and what kv_transfer_params ask."""
