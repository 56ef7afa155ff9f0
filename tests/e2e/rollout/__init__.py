"""Changes to running deployments: rollouts, role moves, proposals and the autopilot."""
