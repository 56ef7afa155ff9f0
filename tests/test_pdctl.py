"""The CLI door: every verb module registers, and a missing one fails loudly."""

import subprocess
import sys

import pytest
import typer

import pdctl
from harness.processes import ROOT


def test_every_verb_module_registers():
    app = typer.Typer()
    pdctl._register(app)
    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    assert {"sim", "plan", "proxy", "bench", "serve", "run-instance"} <= names


def test_a_missing_verb_module_fails_loudly():
    with pytest.raises(pdctl.MissingVerbs, match=r"simulator\.nope cannot be loaded"):
        pdctl._register(typer.Typer(), ("simulator.cli", "simulator.nope"))


def test_the_door_exits_1_naming_the_missing_module(monkeypatch, capsys):
    monkeypatch.setattr(pdctl, "VERB_MODULES", ("connector.gone",))
    monkeypatch.setattr(sys, "argv", ["pdctl", "--help"])
    with pytest.raises(SystemExit) as exit_:
        pdctl.main()
    assert exit_.value.code == 1
    assert "connector.gone cannot be loaded" in capsys.readouterr().err


def test_help_lists_the_verbs():
    out = subprocess.run(
        [sys.executable, str(ROOT / "pdctl.py"), "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "serve" in out.stdout and "proxy" in out.stdout
