"""The supervisor's seam to HTTP: instances' /health, the proxy's admin API, instance moves, pair
checks and refused registrations."""
