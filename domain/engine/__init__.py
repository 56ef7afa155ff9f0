"""What a vLLM engine does on its own: its defaults, its API server's CPU cost, its start time."""
