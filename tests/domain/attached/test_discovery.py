"""Reading discovery's sources: a Prometheus targets answer filtered by the user's labels
(in every spelling a label reaches Prometheus in), and vllm-router's worker list."""

from __future__ import annotations

from typing import Any

import pytest

from domain.attached.discovery import (
    DiscoveryError,
    engine_url,
    label_matches,
    prometheus_label,
    prometheus_targets,
    router_workers,
)


def target(port: int, role: str, path: str = "/metrics", **labels: str) -> dict[str, Any]:
    """An active target as Prometheus 2.42's /api/v1/targets gives it."""
    address = f"127.0.0.1:{port}"
    return {
        "discoveredLabels": {
            "__address__": address,
            "__metrics_path__": path,
            "__scheme__": "http",
            "job": "vllm",
        },
        "labels": {"instance": address, "job": "vllm", "llm_d_ai_role": role, **labels},
        "scrapePool": "vllm",
        "scrapeUrl": f"http://{address}{path}",
        "globalUrl": f"http://host:{port}{path}",
        "lastError": "",
        "lastScrape": "2026-12-05T22:00:00Z",
        "lastScrapeDuration": 0.002,
        "health": "up",
        "scrapeInterval": "1s",
        "scrapeTimeout": "1s",
    }


def answer(*targets: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"activeTargets": list(targets), "droppedTargets": []}}


def test_the_targets_with_the_role_give_their_engine_urls_in_order():
    doc = answer(target(8102, "decode"), target(8100, "prefill"), target(8101, "prefill"))
    found = prometheus_targets(doc, {"llm-d.ai/role": "prefill"})
    assert found.urls == ["http://127.0.0.1:8100", "http://127.0.0.1:8101"]
    assert found.refused == {}


def test_every_label_must_match():
    doc = answer(target(8100, "prefill", namespace="a"), target(8101, "prefill", namespace="b"))
    found = prometheus_targets(doc, {"llm-d.ai/role": "prefill", "namespace": "b"})
    assert found.urls == ["http://127.0.0.1:8101"]


def test_a_kubernetes_pod_label_matches_before_relabelling():
    pod = target(8100, "x")
    pod["discoveredLabels"]["__meta_kubernetes_pod_label_llm_d_ai_role"] = "decode"
    assert label_matches(pod, {"llm-d.ai/role": "decode"})
    assert not label_matches(pod, {"llm-d.ai/role": "prefill"})
    assert prometheus_label("llm-d.ai/role") == "llm_d_ai_role"


def test_a_target_in_two_pools_is_one_instance():
    doc = answer(target(8100, "prefill"), {**target(8100, "prefill"), "scrapePool": "other"})
    assert prometheus_targets(doc, {"llm-d.ai/role": "prefill"}).urls == ["http://127.0.0.1:8100"]


def test_a_target_scraped_elsewhere_than_metrics_is_refused_with_why():
    doc = answer(target(8100, "prefill", path="/probe"), target(8101, "prefill"))
    found = prometheus_targets(doc, {"llm-d.ai/role": "prefill"})
    assert found.urls == ["http://127.0.0.1:8101"]
    assert "a vLLM engine serves /metrics" in found.refused["http://127.0.0.1:8100/probe"]


def test_the_engine_url_is_the_scrape_url_without_metrics():
    assert engine_url("https://node-1:8443/metrics") == "https://node-1:8443"
    with pytest.raises(ValueError, match="no user"):
        engine_url("http://u:p@node-1:80/metrics")


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"status": "error", "error": "x"},
        {"status": "success", "data": []},
        {"status": "success", "data": {"activeTargets": "all"}},
    ],
)
def test_an_answer_that_is_not_a_targets_list_is_a_discovery_error(doc):
    with pytest.raises(DiscoveryError):
        prometheus_targets(doc, {"a": "b"})


def test_odd_targets_are_passed_over():
    doc = answer(target(8100, "prefill"), "x", {"labels": "y"}, {"labels": {}, "scrapeUrl": 3})  # type: ignore[arg-type]
    assert prometheus_targets(doc, {"llm-d.ai/role": "prefill"}).urls == ["http://127.0.0.1:8100"]


WORKERS = {
    "workers": [
        {"url": "http://127.0.0.1:2/", "worker_type": "decode"},
        {"url": "http://127.0.0.1:1", "worker_type": "prefill"},
        {"url": "ftp://127.0.0.1:4", "worker_type": "decode"},
        {"url": 5, "worker_type": "decode"},
        "x",
    ]
}


def test_the_router_gives_each_role_its_workers():
    assert router_workers(WORKERS, "prefill").urls == ["http://127.0.0.1:1"]
    decode = router_workers(WORKERS, "decode")
    assert decode.urls == ["http://127.0.0.1:2"]
    assert "http or https" in decode.refused["ftp://127.0.0.1:4"]


@pytest.mark.parametrize("doc", [{"urls": []}, [1], None, {"workers": {}}])
def test_a_router_answer_without_a_worker_list_is_a_discovery_error(doc):
    with pytest.raises(DiscoveryError, match="no worker list"):
        router_workers(doc, "prefill")
