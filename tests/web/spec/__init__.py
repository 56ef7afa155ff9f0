"""Specs through the API: what is refused, what is stored, edits and diffs."""
