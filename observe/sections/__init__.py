"""The sections of a frame, each pure over one window's deltas: traffic, engines, PD
happening, the prefix cache's saved share, evidence of a change, the serving revision."""
