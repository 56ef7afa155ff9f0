"""Pure: the P:D ratio autopilot's decision, its leading signal (the arrivals' demand) and each
role's capacity."""
