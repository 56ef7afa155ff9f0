"""Is PD happening and right: the PD check, the canary, stale decodes."""
