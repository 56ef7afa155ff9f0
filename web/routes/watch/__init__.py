"""Routes that watch: live frames, events, the trade panel, the KV calculator, the cluster."""
