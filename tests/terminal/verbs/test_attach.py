"""`pdctl attach`: what a vllm-router's worker list gives, and the flags refused before
anything is sent (tests/e2e/attach/test_router.py attaches through the real API and router)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from terminal import exits
from terminal.client import ApiError
from terminal.session import Usage
from terminal.verbs import cli as verbs_cli
from terminal.verbs.attach import _by_flag, discovery_groups, router_workers

WORKERS = {
    "workers": [
        {"url": "http://127.0.0.1:2", "worker_type": "decode"},
        {"url": "http://127.0.0.1:1", "worker_type": "prefill"},
        {"url": "http://127.0.0.1:3", "worker_type": "regular"},
    ]
}


def test_the_worker_list_gives_each_role_its_urls():
    assert router_workers(WORKERS) == (["http://127.0.0.1:1"], ["http://127.0.0.1:2"])


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"urls": []}, "no worker list"),
        ([1, 2], "no worker list"),
        ({"workers": [{"url": "http://127.0.0.1:1", "worker_type": "prefill"}]}, "0 decode"),
    ],
)
def test_a_worker_list_without_a_pair_is_refused(doc, words):
    with pytest.raises(Usage, match=words):
        router_workers(doc)


def run(*args: str):
    app = typer.Typer()
    verbs_cli.register(app)
    return CliRunner().invoke(app, ["attach", *args])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("x", "--prefill", "http://127.0.0.1:1"), "--decode"),
        (("x", "--from-router", "http://127.0.0.1:1", "--prefill", "http://a:1"), "drop --prefill"),
        (
            ("x", "--prefill", "http://a:1", "--decode", "http://b:1", "--proxy-kind", "nginx"),
            "one of",
        ),
        (
            ("x", "--prefill", "http://a:1", "--decode", "http://b:1", "--proxy-kind", "pdctl"),
            "--proxy URL",
        ),
        (("x", "--from-router", "ftp://127.0.0.1:1"), "http or https"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag_before_anything_is_sent(args, words):
    out = run(*args, "--server", "http://127.0.0.1:9")  # nothing listens there
    assert out.exit_code == exits.USAGE, out.output
    assert words in out.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("x", "--match", "job=vllm"), "--match goes with --discover-prometheus"),
        (("x", "--discover-prometheus", "http://127.0.0.1:1", "--match", "job"), "--match 'job'"),
        (
            ("x", "--discover-prometheus", "http://127.0.0.1:1", "--match", "=vllm"),
            "label=value",
        ),
        (
            ("x", "--discover-prometheus", "http://127.0.0.1:1", "--discover-router", "http://a:1"),
            "name one source",
        ),
        (
            ("x", "--discover-router", "http://127.0.0.1:1", "--prefill", "http://127.0.0.1:2"),
            "drop --prefill",
        ),
        (
            ("x", "--discover-prometheus", "http://127.0.0.1:1", "--from-router", "http://a:1"),
            "--from-router",
        ),
    ],
)
def test_bad_discovery_flags_exit_2_naming_the_flag(args, words):
    out = run(*args, "--server", "http://127.0.0.1:9")
    assert out.exit_code == exits.USAGE, out.output
    assert words in out.output


def test_each_role_discovers_with_its_role_label():
    groups = discovery_groups("http://p:9090", None, {"job": "vllm"}, "llm-d.ai/role", 2.0)
    assert groups["decode"] == {
        "prometheus": "http://p:9090",
        "match": {"job": "vllm", "llm-d.ai/role": "decode"},
        "every_s": 2.0,
    }
    by_router = discovery_groups(None, "http://r:80", {}, "llm-d.ai/role", 5.0)
    assert by_router["prefill"] == {"router": "http://r:80", "every_s": 5.0}


@pytest.mark.parametrize(
    ("field", "flag"),
    [
        ("prometheus", "--discover-prometheus"),
        ("router", "--discover-router"),
        ("match", "--match"),
        ("every_s", "--discover-every"),
    ],
)
def test_a_refused_discovery_is_told_by_its_flag(field, flag):
    detail = [{"loc": ["body", "groups", 1, "discover", field], "msg": "not allowed"}]
    told = _by_flag(ApiError("422", 2, 422, detail))
    assert isinstance(told, Usage) and str(told) == f"{flag}: not allowed"
