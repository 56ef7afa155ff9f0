"""The plan and KV pages through FastAPI's TestClient: the form prefilled with the MORI-IO
scenario, the result fragment an htmx submit gets (chart data, rows, max_goodput_rate,
calibration), errors at their fields, and the KV calculator's figures."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from harness.processes import ROOT
from tests.web.conftest import MakeClient

HX = {"HX-Request": "true"}
SMALL = {"run": "1", "rates": "4,8", "workload.num_prompts": "20"}


@pytest.fixture(scope="module")
def pages(make_module_client: MakeClient) -> TestClient:
    return make_module_client(controller=False)


def field_errors(text: str) -> dict[str, str]:
    return {
        k: html.unescape(v) for k, v in re.findall(r'data-error-for="([^"]*)"[^>]*>([^<]*)<', text)
    }


def test_nav_links_to_plan_and_kv(pages):
    text = pages.get("/").text
    assert 'href="/plan"' in text and 'href="/tools/kv"' in text


def test_the_form_is_prefilled_with_the_planners_defaults(pages):
    text = pages.get("/plan").text
    assert "colocated-tp8\ncolocated-2xtp4\ndisagg-read\ndisagg-write" in text
    assert 'name="rates" value="0.5:10:0.5"' in text
    assert 'name="workload.input_len" value="2000"' in text
    # The engine flags are vLLM's for the device, as `pdctl plan`'s: blank, prefix caching
    # by default (on), never the MORI-IO post's 64 / 4,096 with caching off.
    assert 'name="prefill_flags.max_num_seqs" value="" size="5" inputmode="decimal" ' in text
    assert "<option selected>default</option><option>on</option><option>off</option>" in text
    assert "plan-result" not in text  # nothing run yet


def test_the_page_runs_the_plan_pdctl_plan_runs(pages):
    run = {"run": "1", "rates": "6.5", "configs": "disagg-read", "workload.num_prompts": "20"}
    text = pages.get("/plan", params=run, headers=HX).text
    row = re.search(r'<tr data-config="disagg-read" data-rate="6.5"', text)
    assert row, text[-2000:]
    from_page = json.loads(re.search(r'id="plan-chart-data">(.*?)</script>', text, re.S)[1])
    flags = ["--config", "disagg-read", "--rate", "6.5", "--num-prompts", "20", "--json"]
    cli = subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), "plan", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert cli.returncode == 0, cli.stderr
    (from_cli,) = json.loads(cli.stdout)["rows"]
    (series,) = from_page["series"]
    assert series["values"] == [from_cli["slo_attainment"]]
    assert "--enable-prefix-caching on" in text  # vLLM's default, said
    off = pages.get("/plan", params={**run, "prefix_caching": "off"}, headers=HX)
    assert off.status_code == 200 and "--enable-prefix-caching" not in off.text  # given


def test_an_htmx_submit_gets_the_chart_data_and_a_row_per_config_and_rate(pages):
    response = pages.get("/plan", params=SMALL, headers=HX)
    assert response.status_code == 200 and "<html" not in response.text
    text = response.text
    chart = json.loads(re.search(r'id="plan-chart-data">(.*?)</script>', text, re.S)[1])
    assert chart["rates"] == [4.0, 8.0] and chart["share"] == 0.9
    assert [s["label"] for s in chart["series"]] == [
        "colocated-tp8",
        "colocated-2xtp4",
        "disagg-read",
        "disagg-write",
    ]
    assert all(len(s["values"]) == 2 for s in chart["series"])
    assert len(re.findall(r"<tr data-config=\"[^\"]+\" data-rate=", text)) == 8
    assert 'data-goodput-config="disagg-write"' in text and "data-calibration" in text


def test_a_search_from_the_page_ranks_layouts(pages):
    text = pages.get("/plan", params={**SMALL, "search": "on", "rates": "8"}, headers=HX).text
    assert "data-ranked" in text and "data-search-reason" in text


def test_bad_fields_come_back_at_the_fields_with_a_422(pages):
    response = pages.get(
        "/plan",
        params={**SMALL, "rates": "fast", "configs": "1xtp8\nx", "workload.num_prompts": "0"},
        headers=HX,
    )
    assert response.status_code == 422
    errors = field_errors(response.text)
    assert "start:stop:step" in errors["rates"]
    assert "'x': expected NxtpM" in errors["configs"]
    assert "greater than or equal to 1" in errors["workload.num_prompts"]
    assert "plan-chart-data" not in response.text
    too_big = pages.get("/plan", params={**SMALL, "configs": "1xtp8\n9xtp8"}, headers=HX)
    assert too_big.status_code == 422
    assert "needs 72 GPUs, the node has 8" in field_errors(too_big.text)["configs"]


def test_the_page_plans_across_nodes_and_says_which_link_each_hand_off_takes(pages):
    form = pages.get("/plan").text
    for name in ("nodes", "gpus_per_node", "nics_per_node", "nic_gbps", "placement"):
        assert f'name="{name}"' in form
    run = {
        **SMALL,
        "rates": "4",
        "configs": "1p-tp4+1d-tp4",
        "model": "llama-3.1-8b",
        "hardware": "h100",
        "nodes": "2",
        "placement": "split",
    }
    text = pages.get("/plan", params=run, headers=HX).text
    assert "P0 on node 0; D0 on node 1; hand-off inter-node rdma 200 GB/s (P0-&gt;D0)" in text
    bad = pages.get("/plan", params={**run, "nodes": "0"}, headers=HX)
    assert bad.status_code == 422
    assert "greater than or equal to 1" in field_errors(bad.text)["nodes"]


def test_a_busy_planner_is_said_in_the_notice_with_retry_after(pages):
    pages.app.state.plan_running = True
    try:
        response = pages.get("/plan", params=SMALL, headers=HX)
    finally:
        pages.app.state.plan_running = False
    assert response.status_code == 429 and "already running" in response.text
    assert response.headers["retry-after"] == "5" and response.headers["hx-retarget"] == "#notice"


def test_the_kv_page_shows_llama_70b_10k_tokens_at_about_3_3_gb(pages):
    text = pages.get("/tools/kv").text
    assert re.search(r'data-kv-gb="3\.2\d+"', text)
    assert 'id="kv-gb">3.28 GB' in text and "GPU peer-to-peer" in text


def test_the_kv_tiles_give_the_tables_total_for_the_path_taken(pages):
    text = pages.get("/tools/kv").text
    taken = re.search(r'<tr data-path="([\w-]+)" class="taken">.*?data-total-ms="([\d.]+)"', text)
    assert taken, "the in-node path is marked in the table"
    tile = re.search(r'id="kv-node-ms" data-total-ms="([\d.]+)"', text)
    assert tile and tile[1] == taken[2]  # the headline is the table's figure, not the floor
    floor = re.search(r"the wire alone ([\d.]+) ms", text.split('id="kv-node-ms"')[1])
    assert floor and float(floor[1]) < float(tile[1])


def test_the_kv_page_answers_an_htmx_query_and_says_what_is_wrong(pages):
    ok = pages.get(
        "/tools/kv",
        params={"model": "llama-3.1-8b", "tokens": "1000", "p2p": "false", "link_gbps": "25"},
        headers=HX,
    )
    assert ok.status_code == 200 and "<html" not in ok.text
    assert "through host memory" in ok.text and 'id="kv-link-ms"' in ok.text
    assert 'id="kv-handoff"' in ok.text and 'data-path="host"' in ok.text
    bad = pages.get("/tools/kv", params={"tokens": "many"}, headers=HX)
    assert bad.status_code == 422 and "tokens" in bad.text and "data-kv-gb" not in bad.text


def test_the_fidelity_scenario_shows_each_figure_and_which_are_fitted(pages, monkeypatch):
    from simulator.plan import fidelity

    quick = fidelity.fidelity_table.__wrapped__
    monkeypatch.setattr(fidelity, "fidelity_table", lambda seeds=20: quick(1))
    text = pages.get("/plan", params={"run": "1", "scenario": "fidelity"}, headers=HX).text
    assert 'data-fidelity="mori-io.disagg-write.met_both" data-judged="true"' in text
    assert 'data-fidelity="mori-io.colocated-tp8.ttft_p99" data-judged="false"' in text
    assert "no: fitted to it" in text
