"""What vLLM's API server spends CPU on, and what a render tier takes of it (`make bench-frontend`,
`make bench-render`)."""
