"""The database under `pdctl serve`: one control plane per file (lock), and what a write the
storage refuses becomes for a client (faults)."""
