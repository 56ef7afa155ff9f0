"""Reading the documents discovery finds an attached deployment's instances in: a
Prometheus server's active targets (`/api/v1/targets`) and vllm-router's worker list
(`/workers`). Pure: decoded JSON in, engine base URLs out, in the source's order.

A target's engine URL is its scrapeUrl without `/metrics` (vLLM serves its metrics at the
root of its API). The user's labels pick the targets: a key matches the target's label of
that name, its Prometheus spelling (`llm-d.ai/role` -> `llm_d_ai_role`, as relabelling
writes it), or Kubernetes service discovery's `__meta_kubernetes_pod_label_` form among the
labels Prometheus discovered before relabelling.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from domain.attached.addresses import base_url

METRICS_PATH = "/metrics"
POD_LABEL = "__meta_kubernetes_pod_label_"


class DiscoveryError(ValueError):
    """The source answered something that is not what it should be."""


@dataclass(frozen=True, slots=True)
class Found:
    """What one look at a source gave: the engines' URLs, and those left out and why."""

    urls: list[str]
    refused: dict[str, str]  # address as the source gave it -> why it is not an engine's


def prometheus_label(key: str) -> str:
    """`key` as a Prometheus label name: every character outside [a-zA-Z0-9_] an `_`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", key)


def label_matches(target: Mapping[str, Any], match: Mapping[str, str]) -> bool:
    given, seen = target.get("labels"), target.get("discoveredLabels")
    labels: Mapping[str, Any] = given if isinstance(given, dict) else {}
    discovered: Mapping[str, Any] = seen if isinstance(seen, dict) else {}
    for key, want in match.items():
        name = prometheus_label(key)
        values = (labels.get(key), labels.get(name), discovered.get(POD_LABEL + name))
        if want not in values:
            return False
    return True


def prometheus_targets(doc: Any, match: Mapping[str, str]) -> Found:
    """The engines among a `/api/v1/targets` answer's active targets whose labels match."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(data, dict):
        raise DiscoveryError("not a Prometheus targets answer (no status success and data)")
    targets = data.get("activeTargets")
    if not isinstance(targets, list):
        raise DiscoveryError("a Prometheus targets answer without activeTargets")
    urls: list[str] = []
    refused: dict[str, str] = {}
    for target in targets:
        if not isinstance(target, dict) or not label_matches(target, match):
            continue
        scrape = target.get("scrapeUrl")
        if not isinstance(scrape, str):
            continue
        try:
            url = engine_url(scrape)
        except ValueError as err:
            refused[scrape[:300]] = str(err)
            continue
        if url not in urls:  # the same engine in two scrape pools is one instance
            urls.append(url)
    return Found(urls, refused)


def engine_url(scrape_url: str) -> str:
    """`http://host:port/metrics` -> `http://host:port`; ValueError for any other path."""
    parts = urlsplit(scrape_url)
    if parts.path != METRICS_PATH:
        raise ValueError(f"scraped at {parts.path or '/'}: a vLLM engine serves /metrics")
    return base_url(f"{parts.scheme}://{parts.netloc}")


def router_workers(doc: Any, role: str) -> Found:
    """The URLs of `role` among vllm-router's workers ({"workers": [{"url", "worker_type"}]})."""
    workers = doc.get("workers") if isinstance(doc, dict) else None
    if not isinstance(workers, list):
        raise DiscoveryError("no worker list (is it vllm-router's /workers?)")
    urls: list[str] = []
    refused: dict[str, str] = {}
    for worker in workers:
        if not isinstance(worker, dict) or worker.get("worker_type") != role:
            continue
        raw = worker.get("url")
        if not isinstance(raw, str):
            continue
        try:
            url = base_url(raw[:300])
        except ValueError as err:
            refused[raw[:300]] = str(err)
            continue
        if url not in urls:
            urls.append(url)
    return Found(urls, refused)
