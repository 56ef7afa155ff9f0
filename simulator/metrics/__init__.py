"""The stand-in's /metrics: vLLM's names, types, labels and buckets, and its own pdctl_sim_*
families."""
