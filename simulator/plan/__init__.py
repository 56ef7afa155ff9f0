"""The what-if planner (`pdctl plan`): candidate layouts through a workload on the virtual clock,
and the published scenarios it is held against."""
