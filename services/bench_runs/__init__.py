"""Bench runs from the dashboard: the request, the `pdctl bench` subprocess, what a stopped run
keeps, stored runs as curves."""
