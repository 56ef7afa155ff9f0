"""The planner's one error: a layout, workload or flag it cannot run."""


class PlanError(ValueError):
    """A configuration or workload the planner cannot run; the message names the option."""
