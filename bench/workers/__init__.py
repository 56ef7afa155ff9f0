"""`pdctl bench --workers N`: several processes offering one rate's load, and one such worker."""
