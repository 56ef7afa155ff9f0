"""Deployments pdctl did not start: attached by URL, by discovery, behind other routers."""
