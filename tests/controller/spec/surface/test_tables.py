"""The engine tables cover everything vLLM and the stand-in read: every variable of vLLM's own
list and every flag of each engine's parser has a kind, so one a new version adds cannot slip
through unclassified; and each table is stated once, in a form that parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.spec import engine_flags
from controller.spec.surface.kinds import NEVER, Kind, env_table, flag_table, parse

RECORDED_ENV = Path(engine_flags.__file__).with_name("vllm_env_names.txt")


def recorded_env_names() -> list[str]:
    lines = RECORDED_ENV.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_the_recorded_env_list_is_vllm_0_32s_own() -> None:
    assert RECORDED_ENV.read_text().startswith(f"# vLLM {engine_flags.VLLM_VERSION}:")
    names = recorded_env_names()
    assert len(names) > 300 and {"VLLM_LOGGING_STREAM", "VLLM_CACHE_ROOT"} <= set(names)


def test_every_variable_vllm_reads_has_a_kind() -> None:
    unclassified = sorted(set(recorded_env_names()) - set(env_table()))
    assert unclassified == [], f"classify these in controller/spec/surface/env.txt: {unclassified}"


@pytest.mark.parametrize("engine", ["vllm", "sim"])
def test_every_flag_of_each_engine_has_a_kind(engine: str) -> None:
    dests = {f.dest for f in engine_flags.engine_flags(engine).values()}
    unclassified = sorted(dests - set(flag_table(engine)))
    assert unclassified == [], f"classify these dests for {engine}: {unclassified}"


def test_no_table_names_what_its_engine_does_not_read() -> None:
    # A stale entry would be a rename in vLLM that silently left the new name unclassified.
    vllm_dests = {f.dest for f in engine_flags.vllm_flags().values()}
    assert set(flag_table("vllm")) == vllm_dests
    sim_dests = {f.dest for f in engine_flags.sim_flags().values()}
    assert set(flag_table("sim")) - set(flag_table("vllm")) <= sim_dests


@pytest.mark.parametrize("table", [env_table(), flag_table("vllm"), flag_table("sim")])
def test_every_refusal_says_why(table: dict) -> None:
    assert [n for n, e in table.items() if e.kind in NEVER and not e.reason()] == []


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("UCX_GDB_COMMAND", Kind.CODE),
        ("VLLM_PLUGINS", Kind.CODE),
        ("VLLM_CACHE_ROOT", Kind.PATH),
        ("HF_HUB_CACHE", Kind.PATH),
        ("HF_ENDPOINT", Kind.REMOTE),
        ("VLLM_NIXL_SIDE_CHANNEL_HOST", Kind.LISTENER),
        ("VLLM_CPU_KVCACHE_SPACE", Kind.VALUE),
    ],
)
def test_env_entries_say_what_they_do(name: str, kind: Kind) -> None:
    assert env_table()[name].kind is kind


def test_a_malformed_table_line_is_an_error() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse("A value\nB\n")
    with pytest.raises(ValueError):
        parse("A value\nA path\n")  # a name twice
    with pytest.raises(ValueError):
        parse("A runs-things\n")  # no such kind
