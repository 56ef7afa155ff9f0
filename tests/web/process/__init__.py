"""`pdctl serve` as a process: starting, settings, stalls, a full disk, stopping."""
