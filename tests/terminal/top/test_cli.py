"""`pdctl top`'s door and its keys: a bad flag or an unreachable server is one line with the
documented exit code, before any screen is drawn; keys switch window and deployment; the
first deployment shown is a running one; a feed that never connects says why."""

from __future__ import annotations

import pytest

from harness.processes import free_port
from terminal import exits
from terminal.client import ApiError
from terminal.config import Target
from terminal.top.cli import Session, TopError, first_running, handle, no_frame_notice, once
from terminal.top.feed import Feed
from terminal.top.format import ASCII
from tests.terminal.verbs_run import pdctl


def one_line(done, code: int, said: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("pdctl top: error: ") and said in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--window", "2m"), "--window '2m' is not one of 10s, 1m, 5m"),
        (("--json",), "--json needs --once"),
        (("--once", "--timeout", "0"), "--timeout 0 is not between 0.1 and 600 s"),
        (("--interval", "0.1"), "--interval 0.1 is below 0.5 s"),
    ],
)
def test_a_bad_flag_is_a_usage_error_before_anything_is_sent(flags, said) -> None:
    one_line(pdctl("top", *flags, server="http://127.0.0.1:9"), exits.USAGE, said)


@pytest.mark.parametrize("once_", [True, False])
def test_an_unreachable_server_is_one_line_exit_3(once_) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    done = pdctl("top", *(["--once"] if once_ else []), server=server, timeout=60)
    one_line(done, exits.UNREACHABLE, f"--server {server}: cannot reach it")


def test_a_server_that_is_not_a_url_is_a_usage_error() -> None:
    one_line(
        pdctl("top", server="localhost:8000"), exits.USAGE, "is not an http:// or https:// URL"
    )


class Api:
    """The REST client's seam: answers by path, or raises the ApiError given."""

    def __init__(self, answers: dict) -> None:
        self.answers, self.asked = answers, []

    def get(self, path: str, **query):
        self.asked.append(path)
        answer = self.answers.get(path, [])
        if isinstance(answer, ApiError):
            raise answer
        return answer


def session(api: Api, names=("a", "b", "c"), index=0) -> Session:
    return Session(api, Target("http://127.0.0.1:9", None), list(names), index, "1m")


def test_keys_switch_the_window_and_the_deployment_and_q_quits() -> None:
    api = Api({"/api/deployments": [{"name": n} for n in ("a", "b", "c")]})
    s = session(api)
    assert handle(s, "2") and s.feed.window == "1m"  # the window it has: nothing to do
    first = s.feed
    assert handle(s, "1") and s.window == s.feed.window == "10s" and s.feed is not first
    assert s.view.window == "10s" and s.view.frame is None  # no 1m figures under 10s
    assert handle(s, "w") and s.window == "1m"
    assert handle(s, "3") and handle(s, "w") and s.window == "10s"  # 5m wraps to 10s
    assert handle(s, "n") and s.name == "b" and s.view.position == (2, 3)
    assert handle(s, "p") and handle(s, "p") and s.name == "c"  # a wraps back to c
    assert s.feed.deployment == "c" and s.view.deployment == "c"
    assert not handle(s, "q") and not handle(s, "Q")


def test_a_deployment_key_that_cannot_list_says_so_for_a_moment() -> None:
    api = Api({"/api/deployments": ApiError("--server x: cannot reach it", exits.UNREACHABLE)})
    s = session(api)
    handle(s, "n")
    assert s.name == "a"
    assert s.notice(now=0.0) == "cannot list the deployments: --server x: cannot reach it"
    assert s.notice(now=1e12) is None  # gone after its few seconds


def test_without_a_name_the_first_running_deployment_is_shown() -> None:
    api = Api(
        {
            "/api/deployments/a/status": [],
            "/api/deployments/b/status": [{"name": "p", "state": "STOPPED"}],
            "/api/deployments/c/status": [{"name": "p", "state": "RUNNING"}],
        }
    )
    assert first_running(api, ["a", "b", "c"]) == 2
    assert first_running(api, ["a", "b"]) == 0


def test_why_no_frame_comes() -> None:
    f = Feed(Target("http://h", None), "a", "1m")
    f.opens = 1
    assert "a is not running (start it: pdctl start a)" in no_frame_notice("a", [], f)
    stopped = [{"state": "STOPPED"}, {"state": "EXITED"}]
    assert "a is stopped" in no_frame_notice("a", stopped, f)
    assert no_frame_notice("a", [{"state": "STARTING"}], f) == "waiting for a's first frame"


def test_once_without_a_connection_is_unreachable_and_without_a_frame_says_why() -> None:
    s = session(Api({}))
    s.feed = Feed(s.target, "a", "1m", opener=_refuse)
    with pytest.raises(TopError) as err:
        once(s, False, 0.3, ASCII)
    assert err.value.code == exits.UNREACHABLE and "cannot reach" in err.value.message


def _refuse(url: str, **kw):
    raise ConnectionRefusedError(111, "Connection refused")
