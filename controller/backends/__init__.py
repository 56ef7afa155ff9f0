"""The supervisor's seam to processes: local spawns under the shim (`pdctl run-instance`), detached
Ray actors, /proc, private files."""
