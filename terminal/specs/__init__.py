"""Spec files in the terminal: reading one (YAML or JSON, from a path or stdin) and the
field-by-field difference of two specs."""
