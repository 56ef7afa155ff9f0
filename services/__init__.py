"""What `pdctl serve` composes between the controller and the web: admission of specs, bench
and load runs, plan runs, the autopilot loop, proposal forecasts, and the demo. web/ stays HTTP.

Rooms: `bench_runs/` (dashboard bench runs and their stored curves), `demo/` (the demo
deployments of `make run` and their load)."""
