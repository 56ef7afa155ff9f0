"""Metrics math and collection: the scraper (the shell) and the pure core that turns
cumulative histograms into windowed ones, percentiles, goodput and KV throughput, and decides
whether PD is happening and whether answers are right.

Floors: `text_format`, `frames`, `canary` < `samples`, `quantiles`, `canary_probe` <
`windows` < `pd_check`, `saved_share` < `build` < `advice/` (the advisor) < `scraper`."""
