"""The operator verbs' pure parts: reading a spec file (every way it can be wrong), tables,
diffs, the API's error details, the views, readiness, log tails, the bounded poll."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.target import with_defaults
from domain.measures.slo import SloTargets
from terminal import log_tail, views
from terminal.client import describe, problems
from terminal.polling import TimedOut, poll
from terminal.readiness import Goal, summary
from terminal.specs import diff as spec_diff
from terminal.specs.files import SpecFileError, parse, read_spec
from terminal.tables import age, cell, table
from terminal.verbs.apply import report, story
from terminal.verbs.switch import default_strategy


def test_a_spec_reads_from_json_yaml_and_yml(tmp_path: Path) -> None:
    for suffix, text in ((".json", '{"name": "a"}'), (".yaml", "name: a\n"), (".YML", "name: a")):
        path = tmp_path / f"s{suffix}"
        path.write_text(text)
        assert read_spec(str(path)) == {"name": "a"}


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("s.txt", "name: a", "unknown extension '.txt': use .json, .yaml or .yml"),
        ("s", "name: a", "unknown extension '(none)': use .json, .yaml or .yml"),
        ("s.json", "{", "not JSON: Expecting property name enclosed in double quotes at line 1"),
        ("s.yaml", "name: [", "not YAML: expected the node content, but found '<stream end>'"),
        ("s.yaml", "", "empty: a spec is a mapping of fields (name, model, ...)"),
        ("s.json", " \n", "empty: a spec is a mapping of fields (name, model, ...)"),
        ("s.yaml", "- a\n- b\n", "the spec must be a mapping of fields, not a list"),
        ("s.yaml", "just words", "the spec must be a mapping of fields, not a str ('just words')"),
        ("s.yaml", "model: tiny", "name: the spec must name its deployment (a string)"),
        ("s.yaml", "name: 3", "name: the spec must name its deployment (a string)"),
        ("s.yaml", "name: a\nwhen: 2026-01-01", "a value JSON cannot carry (Object of type date"),
        ("s.json", '{"name": "a", "x": NaN}', "a value JSON cannot carry (Out of range float"),
    ],
)
def test_a_bad_spec_file_is_one_line_naming_it(tmp_path, name, text, said) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecFileError) as err:
        read_spec(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: {said}"), message
    assert "\n" not in message


def test_a_spec_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError, match=r"nope\.yaml: no such file$"):
        read_spec(str(tmp_path / "nope.yaml"))
    (tmp_path / "d.json").mkdir()
    with pytest.raises(SpecFileError, match=r"d\.json: is a directory, not a spec file$"):
        read_spec(str(tmp_path / "d.json"))
    (tmp_path / "latin.yaml").write_bytes(b"name: caf\xe9")
    with pytest.raises(SpecFileError, match=r"latin\.yaml: not UTF-8 text$"):
        read_spec(str(tmp_path / "latin.yaml"))
    assert parse("name: a", "stdin", "yaml") == {"name": "a"}


def test_tables_pad_columns_and_say_nothing_as_a_dash() -> None:
    assert table(("name", "ready"), [("mori", "3/3"), ("a", None)]).splitlines() == [
        "NAME   READY",
        "mori   3/3",
        "a      -",
    ]
    assert [cell(v) for v in (True, False, 0.5, 2.0, "a\nb", "")] == [
        "yes", "no", "0.5", "2", "a b", "-",
    ]  # fmt: skip
    assert [age(s) for s in (None, 5.9, 61, 7200, 90000, -3)] == ["-", "5s", "1m", "2h", "1d", "0s"]


def test_the_diff_names_each_changed_leaf() -> None:
    old = {"a": 1, "g": [{"m": "read"}, {"m": "read"}], "gone": "x"}
    new = {"a": 1, "g": [{"m": "write"}], "new": {"k": 2}}
    found = spec_diff.changes(old, new)
    assert spec_diff.lines(found) == [
        '~ g.0.m: "read" -> "write"',
        '- g.1: {"m":"read"} (removed)',
        '- gone: "x" (removed)',
        '+ new: {"k":2}',
    ]
    assert spec_diff.changes(old, old) == []
    assert spec_diff.lines([{"path": ["x"], "op": "?", "old": 1, "new": 2}], "ports.") == [
        "? ports.x: 1 -> 2"
    ]


def test_describe_makes_any_detail_one_line_and_problems_one_per_field() -> None:
    items = [
        {"loc": ["body", "groups", 0, "role"], "msg": "Input should be\n'prefill'"},
        {"loc": ["query", "limit"], "msg": "too big"},
        {"loc": [], "msg": "whole body"},
        "not an item",
    ]
    assert problems(items) == [
        "groups.0.role: Input should be 'prefill'",
        "limit: too big",
        "whole body",
    ]
    assert describe(items) == "groups.0.role: Input should be 'prefill'; limit: too big; whole body"
    assert describe("two\n  lines") == "two lines"
    assert describe(None) == "" and describe({"x": 1}) == ""


def _deployment(revision: int = 1, **spec: object) -> dict:
    return {
        "name": "mori",
        "revision": revision,
        "state": "applied",
        "actor": "operator:alice",
        "reason": None,
        "updated_at": "2026-12-01T10:00:00",
        "spec": {
            "engine": "sim",
            "model": "tiny",
            "topology": "disaggregated",
            "connector": "MoRIIOConnector",
            "groups": [
                {"name": "prefill", "role": "prefill", "mode": "read"},
                {"name": "decode", "role": "decode", "mode": "write"},
            ],
            **spec,
        },
        "ports": {"proxy": 1, "registry": 2, "instances": {}},
    }


def test_apply_reports_created_unchanged_or_each_change() -> None:
    old, new = _deployment(), _deployment(2, model="big")
    assert report(None, old, dry_run=False) == [
        "mori created at revision 1: `pdctl start mori` runs it"
    ]
    assert report(None, old, dry_run=True) == [
        "mori would be created at revision 1 (dry run: nothing stored)"
    ]
    assert report(old, old, dry_run=False) == ["mori unchanged at revision 1"]
    assert report(old, new, dry_run=True) == [
        "mori: revision 1 -> 2 (dry run: nothing stored)",
        '  ~ model: "tiny" -> "big"',
    ]
    changed = {"changes": [{"path": ["model"]}, {"path": ["groups", 0, "mode"]}]}
    now = _deployment(2) | {"reason": "bigger"}
    assert story(now, changed) == (
        "; revision 2 was written by operator:alice at 2026-12-01 10:00:00 (bigger), "
        "changing model, groups.0.mode"
    )
    assert story(_deployment(2), {"changes": []}).endswith("changing no spec field")


def test_apply_says_what_a_rollout_would_do_on_a_dry_run() -> None:
    old = {"name": "mori", "revision": 2, "spec": {"model": "tiny"}, "ports": {}}
    preview = {
        "preview": True,
        "changes": {"keep": ["proxy"], "restart": ["prefill-0", "decode-0"], "start": []},
        "why": {"prefill-0": "command line: --max-model-len"},
        "strategies": {"roll": "roll needs two or more of each", "hold": None,
                       "keep-serving": "for a mode switch", "recreate": None},
        "default": "hold",
    }  # fmt: skip
    new = old | {"revision": 3, "spec": {"model": "tiny", "max_model_len": 1024}}
    assert report(old, new | {"rollout": preview}, dry_run=True)[2:] == [
        "would roll out by hold: restart prefill-0, decode-0",
        "  prefill-0: command line: --max-model-len",
        "  not roll: roll needs two or more of each",
    ]
    said = report(old, new | {"rollout": preview}, dry_run=True, strategy="recreate")
    assert said[2] == "would roll out by recreate: restart prefill-0, decode-0"


def test_the_views_of_a_deployment_and_its_instances() -> None:
    d = _deployment()
    units = [
        {"name": "proxy", "role": "proxy", "state": "RUNNING", "health": None, "pid": 7},
        {"name": "decode-0", "role": "decode", "mode": "write", "state": "STARTING",
         "health": False, "url": "http://n1:8100", "pid": 8, "restarts": 1, "uptime": 75.0},
    ]  # fmt: skip
    listed = views.deployments([d], {"mori": units}, datetime(2026, 12, 1, 10, 5, tzinfo=UTC))
    assert listed.splitlines()[1].split() == [
        "mori", "1", "applied", "disaggregated", "read,write", "tiny", "1/2", "5m",
    ]  # fmt: skip
    shown = views.deployment(d, units)
    assert "Groups:   prefill (prefill, 1x tp1, read), decode (decode, 1x tp1, write)" in shown
    assert shown.splitlines()[-1].split() == [
        "decode-0", "decode", "write", "STARTING", "unhealthy", "n1", "8", "1", "1m",
    ]  # fmt: skip
    assert views.deployment(d, []).endswith("No instances: not started (pdctl start mori)")
    solo = {"groups": [{"name": "m", "role": "colocated"}]}
    assert views.modes(solo) == "colocated" and views.ready([]) == "-"


def test_the_node_column_prints_addresses_as_top_does() -> None:
    from terminal.top.view import node_of

    on_ray = {"name": "decode-0", "role": "decode", "state": "RUNNING", "node": "a" * 56,
              "address": "10.0.0.2", "url": "http://10.0.0.2:8100"}  # fmt: skip
    local = {"name": "proxy", "role": "proxy", "state": "RUNNING", "node": None,
             "address": None, "url": "http://127.0.0.1:8000"}  # fmt: skip
    shown = views.instances([on_ray, local])
    assert "a" * 12 not in shown
    assert [line.split()[5] for line in shown.splitlines()[1:]] == ["10.0.0.2", "127.0.0.1"]
    assert (node_of(on_ray), node_of(local)) == ("10.0.0.2", "127.0.0.1")


def test_show_says_what_the_autopilot_does() -> None:
    moved = {
        "mode": "on",
        "last_move": {"instance": "decode-1", "from": "decode", "to": "prefill",
                      "revision": 3, "why": "TTFT-bound for 60 s: one decode to prefill"},
    }  # fmt: skip
    shown = views.deployment(_deployment(), [], moved)
    assert "Autopilot: on, last move decode-1 decode -> prefill (revision 3): TTFT-bound" in shown
    dry = {**moved, "mode": "dry-run", "last_move": {**moved["last_move"], "dry_run": True}}
    assert "dry-run, would move decode-1" in views.autopilot_line(dry)
    idle = {"mode": "on", "last_move": None, "last_decision": {"why": "not 60 s of samples yet"}}
    assert views.autopilot_line(idle) == "on, no move yet (not 60 s of samples yet)"
    assert "Autopilot" not in views.deployment(_deployment(), [])


def test_a_switch_shows_its_step_and_ends_in_one_line() -> None:
    record = {
        "id": "r3", "deployment": "mori", "target": "write", "strategy": "hold",
        "state": "running", "steps": ["pause read", "restart prefill-0"],
        "current": "restart prefill-0", "started_at": 10.0, "ended_at": None,
        "revision": 3, "revision_state": "in_progress",
    }  # fmt: skip
    assert views.switch_step(record) == "step 2/2: restart prefill-0"
    assert views.switch_step(record | {"current": None}) == "starting"
    assert views.switch_step(record | {"current": "expect both modes"}) == "expect both modes"
    failed = record | {
        "state": "failed", "ended_at": 12.5, "revision_state": "rolled_back", "rejected": 2,
        "failed_step": "restart prefill-0", "error": "restart prefill-0: it died",
    }  # fmt: skip
    assert views.switch_outcome(failed) == (
        "mori: switch r3 to write by hold failed in 2.5 s (revision 3 rolled back); "
        "2 rejected with 503: failed at 'restart prefill-0': restart prefill-0: it died"
    )
    assert default_strategy(_deployment()["spec"]) == "hold"
    two = [{"role": r} for r in ("prefill", "prefill", "decode", "decode")]
    assert default_strategy({"groups": two}) == "roll"


def test_the_events_and_the_advice_views() -> None:
    event = {"ts": "2026-12-01T10:00:00", "actor": "ops", "kind": "switch.done", "message": "ok"}
    assert views.events([event]).splitlines()[1].split() == [
        "2026-12-01", "10:00:00", "ops", "switch.done", "ok",
    ]  # fmt: skip
    assert views.event_line(event) == "2026-12-01 10:00:00   ops   switch.done   ok"
    advice = {
        "deployment": "mori", "window": "1m", "live": False,
        "verdicts": [
            {"rule": "r1", "triggered": True, "advice": "split", "evidence": {"itl": 9.5}},
            {"rule": "r2", "triggered": None, "advice": "no signal", "evidence": {}},
        ],
    }  # fmt: skip
    assert views.advice(advice).splitlines() == [
        "mori: advice over the 1m window (not live: no frame yet (not running or not scraped))",
        "  [YES] r1: split",
        "        itl=9.5",
        "  [  ?] r2: no signal",
    ]


def _unit(name: str, state: str, pid: int | None = 1, **more: object) -> dict:
    return {"name": name, "state": state, "pid": pid, **more}


def test_readiness_up_down_and_given_up() -> None:
    up, down = Goal("up"), Goal("down")
    assert up.verdict([_unit("a", "RUNNING"), _unit("b", "STARTING")]) == (False, None)
    assert up.verdict([_unit("a", "RUNNING")]) == (True, None)
    assert up.verdict([]) == (False, None)
    assert down.verdict([_unit("a", "STOPPED"), _unit("b", "EXITED")]) == (True, None)
    assert down.verdict([_unit("a", "STOPPING")]) == (False, None)
    fatal = _unit("a", "FATAL", failures=3, last_exit_code=1, log_error="bad flag")
    assert up.verdict([fatal]) == (
        True,
        "a is FATAL (gave up after 3 failed start(s), last exit code 1): bad flag",
    )
    assert up.verdict([_unit("b", "FATAL")])[1] == "b is FATAL (gave up after 0 failed start(s))"
    assert summary([_unit("a", "RUNNING"), _unit("b", "STARTING"), _unit("c", "RUNNING")]) == (
        "3 processes: 2 RUNNING, 1 STARTING"
    )
    assert summary([]) == "no processes"


def test_a_followed_log_prints_only_what_is_new() -> None:
    assert log_tail.fresh([], ["a", "b"]) == (["a", "b"], False)
    assert log_tail.fresh(["a", "b", "c"], ["b", "c", "d", "e"]) == (["d", "e"], False)
    assert log_tail.fresh(["a", "b"], ["a", "b"]) == ([], False)
    assert log_tail.fresh(["x", "x"], ["x", "x", "x"]) == (["x"], False)
    assert log_tail.fresh(["a", "b"], ["c", "d"]) == (["c", "d"], True)


def test_a_poll_is_bounded_in_time() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    answers = iter(range(100))
    got = poll(lambda: next(answers), lambda n: n == 3, 10, 1.0, sleep, lambda: now[0])
    assert got == 3 and slept == [1.0, 1.0, 1.0]
    with pytest.raises(TimedOut) as out:
        poll(lambda: next(answers), lambda n: False, 2.5, 1.0, sleep, lambda: now[0])
    assert isinstance(out.value.last, int) and now[0] == pytest.approx(5.5)


def test_bench_takes_the_deployments_slo_where_no_flag_sets_one() -> None:
    stored = SloTargets(1000.0, 50.0, None, "p99")
    assert with_defaults(SloTargets(), stored, stat_given=False) == stored
    given = SloTargets(None, 20.0, 30.0, "max")
    assert with_defaults(given, stored, stat_given=True) == SloTargets(1000.0, 20.0, 30.0, "max")
    assert json.dumps(spec_diff.changes({"a": [1]}, {"a": []})) == (
        '[{"path": ["a", 0], "op": "removed", "old": 1, "new": null}]'
    )
