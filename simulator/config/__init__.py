"""The stand-in's settings, parsed from vLLM's flags and JSON configs, and its fault injection."""
