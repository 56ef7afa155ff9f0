"""The advisor: its rules over measured signals, and the signals from live frames or a written bench
result."""
