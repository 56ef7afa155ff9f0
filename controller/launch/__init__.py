"""Pure: what runs for a spec: each process's argv and env, its ports and node, the cluster as read,
secrets masked in what is stored and shown."""
