"""The canary: its verdicts and state (state.py) and the runner that sends its probes on
a schedule (runner.py)."""
