"""The life of every process: a pure state machine `step(state, event, now)`, and the asyncio
supervisor that feeds it probes and performs its actions."""
