"""Changing a running deployment: read/write mode switches (plan, steps, forecast, preview, record,
runner) and runtime role moves."""
