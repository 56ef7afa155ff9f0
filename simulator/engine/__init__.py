"""The continuous-batching scheduler modelled on vLLM v1, its KV block pool and requests, run on a
virtual or a wall clock."""
