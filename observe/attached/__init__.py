"""Watching a deployment pdctl did not start: its status and frames, and its TTFT parts."""
