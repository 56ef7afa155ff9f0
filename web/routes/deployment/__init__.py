"""Routes that change one deployment: its records, lifecycle, revisions, rollouts, role
moves and proxy steering."""
