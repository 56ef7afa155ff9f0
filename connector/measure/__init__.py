"""What the proxy measures: each request's timing as the client sees it, arrivals' demand, prefill
interference, and the Prometheus export."""
