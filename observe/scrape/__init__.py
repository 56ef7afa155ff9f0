"""The observer's shell: it scrapes the proxies and engines, builds frames and publishes
them on the hub (the only I/O of observe/)."""
