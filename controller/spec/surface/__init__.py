"""What a spec may give an engine, by what each env name and flag does: the tables (kinds.py
and its .txt files), the values each kind takes (values.py), and where a path or a listener may
point on the host (reach.py)."""
