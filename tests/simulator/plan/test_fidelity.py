"""`pdctl plan --fidelity`: every published figure beside the model's, fitted ones not judged."""

import json

import pytest
import typer
from typer.testing import CliRunner

from simulator.plan import cli as plan_cli
from simulator.plan.fidelity import FidelityRow, fidelity_table, fitted_figures
from simulator.plan.scenarios import MORI_IO_PUBLISHED


@pytest.fixture(scope="module")
def table():
    return fidelity_table(seeds=2)


def test_every_published_mori_io_figure_has_a_row(table):
    ids = {r["id"] for r in table["fidelity"]}
    for config, published in MORI_IO_PUBLISHED.items():
        for key in ("met_both", "fail_ttft_only", "fail_itl_only", "itl_clusters"):
            assert f"mori-io.{config}.{key}" in ids
        for stat in published["ttft_s"]:
            assert f"mori-io.{config}.ttft_{stat}" in ids


def test_a_figure_a_factor_was_fitted_to_is_shown_but_not_judged(table):
    fitted = fitted_figures()
    assert "mori-io.colocated-tp8.ttft_p99" in fitted  # the TP8 table's own fit
    assert "mori-io.disagg-write.ttft_p50" in fitted
    for row in table["fidelity"]:
        assert row["judged"] is (row["id"] not in fitted)
    assert table["judged"] == sum(r["judged"] for r in table["fidelity"])
    # the must-show claims of the scenario are judged rows, none of them a fitted figure
    assert not {f"mori-io.{c}.met_both" for c in MORI_IO_PUBLISHED} & fitted


def test_kv_sizes_match_the_profiles_table_exactly(table):
    kv = [r for r in table["fidelity"] if r["id"].endswith("bytes_per_token")]
    assert len(kv) == 4 and all(r["published"] == r["model"] for r in kv)


def test_every_moriio_pr_length_answers_in_both_modes(table):
    # a write-mode decode used to sleep past a KV that landed while it had nothing to compute
    rows = [r for r in table["fidelity"] if r["id"].startswith("moriio-pr.")]
    assert len(rows) == 10
    by_id = {r["id"]: r["model"] for r in rows}
    for tokens in (2048, 4096, 8192, 16384, 32768):
        assert by_id[f"moriio-pr.write.{tokens}"] <= by_id[f"moriio-pr.read.{tokens}"]
    ttfts = [by_id[f"moriio-pr.read.{t}"] for t in (2048, 4096, 8192, 16384, 32768)]
    assert ttfts == sorted(ttfts) and ttfts[-1] < 10_000


def test_errors_are_differences_for_counts_and_relative_for_times():
    assert FidelityRow("mori-io.x.met_both", "s", "f", 70, 68.0).error == "-2"
    assert FidelityRow("mori-io.x.ttft_p50", "s", "f", 0.5, 0.6).error == "+20%"
    assert FidelityRow("mori-io.x.itl_clusters", "s", "f", "a", "b").error == "-"


def _plan(*args):
    app = typer.Typer()
    plan_cli.register(app)
    app.command("noop")(lambda: None)
    return CliRunner().invoke(app, ["plan", *args])


def test_the_cli_prints_the_table_and_its_json():
    result = _plan("--fidelity", "--seeds", "1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["seeds"] == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fidelity", "--seeds", "0"], "--seeds must be between 1 and 200"),
        (["--scenario", "fidelity"], "use --fidelity"),
    ],
)
def test_bad_fidelity_flags_exit_2_naming_them(args, needle):
    result = _plan(*args)
    assert result.exit_code == 2 and needle in result.output
