"""Attached deployments' words: which addresses they may name, and what discovery reads."""
