"""Metrics math and collection: the observer (the shell, scrape/) and the pure core that
turns cumulative histograms into windowed ones, percentiles, goodput and KV throughput, and
decides whether PD is happening and whether answers are right.

Floors: `frames`, `canary/` < `metrics/` (Prometheus text, samples, windows, quantiles) <
`sections/` (a frame's sections), `attached/` < `build` < `advice/` (the advisor) <
`scrape/`, `discovery/`, `ttft_breakdown`."""
