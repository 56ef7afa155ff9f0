"""Every float flag of every verb refuses inf and nan naming the flag, exit 2, no traceback
(issue 39, weak 8): the given three (`move --drain-timeout inf`, `plan --rate 0.5:inf:0.5`,
`kv --link-gbps inf`), their variants (nan, -inf, 1e999), and the whole class: each float
flag the verbs register is found and checked."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated

import pytest
import typer

import pdctl
from harness.processes import ROOT
from terminal.finite_flags import _checked, _float_flags, refuse_non_finite


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (
            [
                "move",
                "pd",
                "decode-0",
                "--role",
                "prefill",
                "--reason",
                "r",
                "--drain-timeout",
                "inf",
            ],
            "--drain-timeout",
        ),
        (
            [
                "move",
                "pd",
                "decode-0",
                "--role",
                "prefill",
                "--reason",
                "r",
                "--drain-timeout",
                "1e999",
            ],
            "--drain-timeout",
        ),
        (["kv", "--link-gbps", "inf"], "--link-gbps"),
        (["kv", "--link-gbps", "nan"], "--link-gbps"),
        (["kv", "--decode-step-ms", "-inf"], "--decode-step-ms"),
        (["plan", "--rate", "0.5:inf:0.5"], "--rate"),
        (["plan", "--rate", "nan"], "--rate"),
        (["plan", "--rate", "1,inf"], "--rate"),
        (["sim", "tiny", "--port", "9", "--time-scale", "inf"], "--time-scale"),
    ],
)
def test_a_non_finite_float_is_refused_naming_the_flag(args, flag) -> None:
    out = run(*args)
    assert out.returncode == 2, out.stderr[-2000:]
    assert flag in out.stderr and "Traceback" not in out.stderr
    assert "0.0 ms" not in out.stdout


def test_every_float_flag_of_every_verb_is_checked() -> None:
    pdctl._register(pdctl.app)  # what main() registers
    found = {}

    def walk(app: typer.Typer) -> None:
        for info in app.registered_commands:
            if info.callback is not None:
                found.update({f"{info.name} {f}": f for f in _float_flags(info.callback).values()})
        for group in app.registered_groups:
            walk(group.typer_instance)

    walk(pdctl.app)
    names = set(found)
    for expected in ("move --drain-timeout", "kv --link-gbps", "kv --decode-step-ms"):
        assert expected in names, sorted(names)
    assert len(names) > 20


def test_a_checked_verb_refuses_inf_nan_and_lists_of_them() -> None:
    def verb(
        rate: Annotated[float, typer.Option("--rate")] = 1.0,
        many: Annotated[list[float] | None, typer.Option("--many")] = None,
    ) -> float:
        return rate

    checked = _checked(verb)
    assert checked(rate=2.0, many=[1.0]) == 2.0
    for kwargs, flag in (
        ({"rate": float("nan"), "many": []}, "--rate"),
        ({"rate": 1.0, "many": [1.0, float("inf")]}, "--many"),
    ):
        with pytest.raises(typer.BadParameter) as err:
            checked(**kwargs)
        assert err.value.param_hint == flag
    app = typer.Typer()
    app.command()(verb)
    refuse_non_finite(app)
    assert app.registered_commands[0].callback is not verb
