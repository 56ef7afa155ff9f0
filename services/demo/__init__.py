"""The demo of `make run`: the tiny stand-in deployment, the simulated trade pair, and their
load."""
