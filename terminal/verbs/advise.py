"""`pdctl advise NAME`: the advisor's verdicts on a deployment's live measurements, then each
change a triggered verdict proposes, with the planner's forecast on the measured workload;
`--apply RULE` applies one (POST /proposals/apply, from the revision just read), and prints
the revision it made. A verdict that no longer holds, or a revision stored meanwhile, is a 409
(exit 5); a rule with no change here is a 422 (exit 1); a rule the advisor does not have is
a usage error naming the closest one (exit 2)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from domain.names import did_you_mean
from terminal import views
from terminal.client import ApiClient
from terminal.session import (
    JsonOption,
    ReasonOption,
    ServerOption,
    Usage,
    client,
    one_of,
    show_json,
)
from terminal.verbs.read import WINDOWS, Name, path

APPLY_TIMEOUT_S = 600.0  # a role move waits out a drain (up to 300 s), a restart its stop


def advise(
    name: Name,
    window: Annotated[str, typer.Option(help="The frame's window: 10s, 1m or 5m.")] = "1m",
    apply: Annotated[
        str | None,
        typer.Option(
            "--apply",
            help="Apply the change this rule's verdict proposes (it must still hold).",
            show_default=False,
        ),
    ] = None,
    reason: ReasonOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """The advisor's verdicts and proposed changes; --apply RULE applies one."""
    if window not in WINDOWS:
        raise one_of("--window", window, WINDOWS)
    api = client(server)
    proposals = api.get(path(name, "/proposals"), window=window)
    if apply is not None:
        known_rule(api, name, apply, window)
        body = {"rule": apply, "revision": proposals["revision"], "window": window}
        if reason:
            body["reason"] = reason
        api.timeout_s = max(api.timeout_s, APPLY_TIMEOUT_S)
        applied = api.post(path(name, "/proposals/apply"), body)
        if as_json:
            show_json(applied)
        else:
            typer.echo(applied_line(name, applied))
        return
    answer = api.get(path(name, "/advice"), window=window)
    if as_json:
        show_json({**answer, "proposals": proposals["proposals"]})
        return
    typer.echo(views.advice(answer))
    typer.echo(proposals_text(name, proposals))


def known_rule(api: ApiClient, name: str, rule: str, window: str) -> None:
    """Refuse a rule the advisor does not have, naming the closest, before anything is sent
    (the server would say only that it proposes no change)."""
    rules = [v["rule"] for v in api.get(path(name, "/advice"), window=window)["verdicts"]]
    if rule not in rules:
        raise Usage(
            f"--apply {rule!r}: unknown rule{did_you_mean(rule, rules)}; the rules: "
            + ", ".join(rules)
        )


def proposals_text(name: str, found: dict[str, Any]) -> str:
    items = found.get("proposals") or []
    if not items:
        waiting = found.get("not_enough_evidence")
        return f"no change proposed: {waiting}" if waiting else "no change proposed"
    out = [f"proposed changes (from revision {found['revision']}):"]
    for p in items:
        out.append(f"  {p['rule']}: {p['summary']}")
        for line in p.get("changes_text") or ():
            out.append(f"    change: {line}")
        out.append(f"    how: {p['how']}; {p['disruption']}")
        out.append(f"    forecast: {forecast_line(p)}")
        note = ((p.get("forecast") or {}).get("predicted") or {}).get("baseline_note")
        if note:
            out.append(f"    baseline: {note}")
        out.append(f"    apply: pdctl advise {name} --apply {p['rule']}")
    return "\n".join(out)


def forecast_line(p: dict[str, Any]) -> str:
    f, watch = p.get("forecast") or {}, p["watch"]
    predicted = f.get("predicted") or {}
    if f.get("source") != "planner":
        return f"{watch['signal']} should go {watch['direction']} ({f.get('why', 'no forecast')})"
    w = f["workload"]
    said = predicted.get("direction")
    agrees = "as proposed" if predicted.get("agrees") else "NOT as proposed"
    if isinstance(predicted.get("now_measured"), int | float):  # the figure the page shows
        moved = (
            f"{watch['signal']} {_num(predicted.get('baseline'))} measured -> "
            f"~{_num(predicted.get('expected'))} (the planner: {_num(predicted.get('now'))} -> "
            f"{_num(predicted.get('after'))}, {said}, {agrees})"
        )
    else:
        moved = (
            f"{watch['signal']} {_num(predicted.get('now'))} -> {_num(predicted.get('after'))} "
            f"({said}, {agrees})"
        )
    return (
        f"{moved}; the planner on {w['num_prompts']} requests of "
        f"{w['input_len']} in / {w['output_len']} out at {_num(w['rate'])} req/s, "
        f"{f['now']['config']} -> {f['after']['config']}"
    )


def applied_line(name: str, a: dict[str, Any]) -> str:
    line = f"{name}: applied {a['rule']} ({a['how']}): {a['summary']} -> revision {a['revision']}"
    if a.get("restarted"):
        line += "; restarted on it"
    if a.get("switch"):
        line += f"; switch {a['switch']['id']} running (pdctl events {name} --follow)"
    return line


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "?"
