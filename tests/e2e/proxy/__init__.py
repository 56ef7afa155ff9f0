"""`pdctl proxy` through real processes: its failures, NIXL, bidirectional KV."""
