"""The docs: the site builds strictly (no broken link or anchor, no page left out of the nav),
README.md's relative links reach files, and the CLI reference names every verb and flag."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import typer
import typer.main

import pdctl
from harness.processes import ROOT

CLI_REFERENCE = ROOT / "docs" / "reference" / "cli.md"
# [text](target) and [label]: target; a target ends at whitespace or the closing parenthesis.
INLINE_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def relative_links(markdown: str) -> list[str]:
    """Link targets that name a file in the repository (no scheme, not a bare #anchor), without
    their anchors; code blocks are not markdown, so links inside them are not links."""
    text = FENCE.sub("", markdown)
    targets = INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)
    return [
        t.split("#", 1)[0]
        for t in targets
        if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE) and not t.startswith("#")
    ]


def test_relative_links_finds_files_and_skips_the_rest():
    text = (
        "[a](docs/x.md#part) [b](https://example.com) [c](#here) [d](<docs/y.md>)\n"
        "```\n[e](not/a/link.md)\n```\n[f]: docs/ref.md\n"
    )
    assert relative_links(text) == ["docs/x.md", "docs/y.md", "docs/ref.md"]


def test_every_relative_link_in_the_readme_reaches_a_file():
    readme = ROOT / "README.md"
    links = relative_links(readme.read_text())
    assert links, "README.md links into docs/"
    missing = [link for link in links if not (readme.parent / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_site_builds_strictly(tmp_path):
    # --strict turns every warning into a failure; mkdocs.yml's `validation` makes broken
    # links and anchors, absolute links and pages missing from the nav warnings.
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "runbook" / "itl-spikes" / "index.html").exists()


def verbs(group: typer.core.TyperGroup, path: tuple[str, ...] = ()) -> Iterator[tuple[str, list]]:
    """(`pdctl VERB [SUBVERB]`, its parameters) for every verb, sub-verbs of groups included."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from verbs(command, (*path, name))
        else:
            yield " ".join(("pdctl", *path, name)), command.params


def test_the_cli_reference_names_every_verb_and_flag():
    app = typer.Typer()
    pdctl._register(app)
    reference = CLI_REFERENCE.read_text()
    documented = set(re.findall(r"^### (pdctl [a-z0-9 -]+)$", reference, re.MULTILINE))
    missing = []
    for verb, params in verbs(typer.main.get_command(app)):
        if verb not in documented:
            missing.append(verb)
            continue
        section = reference.split(f"### {verb}\n", 1)[1].split("\n### ", 1)[0]
        flags = [flag for p in params for flag in (*p.opts, *p.secondary_opts)]
        missing += [f"{verb} {f}" for f in flags if f.startswith("-") and f"`{f}`" not in section]
    assert not missing, f"docs/reference/cli.md does not describe: {missing}"
    stale = documented - {verb for verb, _ in verbs(typer.main.get_command(app))}
    assert not stale, f"docs/reference/cli.md describes verbs pdctl lacks: {stale}"


def test_the_readme_states_each_rollout_strategy_as_the_engine_does():
    from controller.rollout.strategies import STRATEGIES, STRATEGY_SUMMARY

    # The README wraps lines; the statement is compared word for word.
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert set(STRATEGY_SUMMARY) == set(STRATEGIES)
    for name, summary in STRATEGY_SUMMARY.items():
        assert f"{name}: {' '.join(summary.split())}" in readme, name
