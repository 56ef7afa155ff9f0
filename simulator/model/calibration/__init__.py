"""Calibration from measurements: step observations read off per-request timings, a least-
squares fit of a few step-cost coefficients, and the calibrated timing the planner runs on.

- `observations`: what each engine step cost, reconstructed from a bench's per-request records
- `served`: the mean step of each request's decode (and its prefill leg), from a proxy's log
- `fit`: least squares (non-negative) on those steps; the hand-off from the proxy's TTFT parts
- `profile`: the calibrated profile (its coefficients, where they came from) and its timing
"""
