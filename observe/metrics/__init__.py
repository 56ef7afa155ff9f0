"""Prometheus text read into samples, counters into window deltas, histograms into
quantiles: the arithmetic every frame section and attached view stands on."""
