"""Layouts across nodes: where each engine sits, and the link each hand-off takes."""
