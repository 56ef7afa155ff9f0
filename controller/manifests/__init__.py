"""Pure: a deployment rendered for docker compose and for Kubernetes (StatefulSets or
LeaderWorkerSets, Services, a PodMonitor)."""
