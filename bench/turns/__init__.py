"""Multi-turn chat workloads: conversations whose every turn carries the answers before it."""
