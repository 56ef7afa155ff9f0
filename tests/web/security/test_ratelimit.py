"""Failed sign-ins per client address: the sliding window on a fake clock, then /login, the API
and the websocket answering 429 (4429) with Retry-After once an address has used them up."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.clock import ManualClock
from tests.specs import nixl_1p1d
from tests.web.conftest import OPERATOR, VIEWER, MakeClient
from web.security.auth import TokenBook
from web.security.ratelimit import FailureWindow
from web.settings import Settings


def test_the_window_refuses_after_the_limit_until_the_oldest_failure_expires() -> None:
    w = FailureWindow(limit=3, window=60.0)
    for t in (0.0, 10.0, 20.0):
        assert w.retry_after("a", t) is None
        w.failed("a", t)
    assert w.retry_after("a", 20.0) == pytest.approx(40.0)
    assert w.retry_after("a", 59.9) == pytest.approx(0.1)
    assert w.retry_after("a", 60.0) is None  # the failure at 0 has left the window
    w.failed("a", 60.0)
    assert w.retry_after("a", 61.0) == pytest.approx(9.0)  # now the one at 10 is oldest


def test_addresses_are_counted_apart() -> None:
    w = FailureWindow(limit=2, window=60.0)
    w.failed("a", 0.0)
    w.failed("a", 1.0)
    assert w.retry_after("a", 2.0) is not None
    assert w.retry_after("b", 2.0) is None


def test_memory_is_bounded_per_address_and_in_addresses() -> None:
    w = FailureWindow(limit=3, window=60.0, max_clients=100)
    for i in range(10_000):
        w.failed("a", i * 0.001)  # a flood from one address keeps `limit` times
        w.failed(f"10.0.{i // 256}.{i % 256}", i * 0.001)
    assert len(w._failures["a"]) == 3
    assert w.clients() == 100
    assert w.retry_after("a", 10.0) is not None  # the flooder stays refused
    assert w.retry_after("a", 100.0) is None and w.clients() == 99  # forgotten once expired


def test_silly_limits_are_refused() -> None:
    for kwargs in ({"limit": 0}, {"limit": 1, "window": 0}, {"limit": 1, "max_clients": 0}):
        with pytest.raises(ValueError):
            FailureWindow(**kwargs)


def test_the_book_refuses_wrong_tokens_past_the_limit_but_never_a_right_one() -> None:
    clock = ManualClock()
    book = TokenBook(Settings(operator_tokens=[OPERATOR], login_attempts_per_minute=2), clock=clock)
    assert book.check("op-secret", "a").label == "operator:alice"  # successes are free
    assert book.check("nope", "a") is None
    assert book.check("nope2", "a") is None
    with pytest.raises(Exception, match="too many failed sign-ins from this address") as err:
        book.check("nope3", "a")
    assert err.value.status == 429 and err.value.headers() == {"Retry-After": "60"}
    # Issue 39: a guesser on a shared address does not lock its operators out.
    assert book.check("op-secret", "a").label == "operator:alice"
    assert book.check("nope", "b") is None  # another address has its own count
    clock.now += 60.0
    assert book.check("nope", "a") is None


def test_failures_count_over_all_addresses_too_so_rotating_them_gains_nothing() -> None:
    clock = ManualClock()
    book = TokenBook(
        Settings(operator_tokens=[OPERATOR], login_attempts_per_minute=10), clock=clock
    )
    refused = 0
    for i in range(100):  # one wrong token from each of 100 addresses in 127.0.0.0/8
        try:
            book.check(f"guess{i}", f"127.{i}.{i % 7}.{i % 251 + 1}")
        except Exception as exc:
            assert "from all addresses together" in str(exc)
            refused += 1
    assert refused == 50  # five times the per-address limit gets through a minute
    assert book.check("op-secret", "127.0.0.1").label == "operator:alice"
    clock.now += 61.0
    assert book.check("guess", "127.9.9.9") is None


def test_the_count_over_all_addresses_has_bounded_memory() -> None:
    w = FailureWindow(limit=3, window=60.0, max_clients=100, global_limit=15)
    for i in range(10_000):
        w.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", i * 0.001)
    assert w.clients() == 100 and len(w._everyone) == 15


@pytest.fixture
def limited(make_client: MakeClient) -> TestClient:
    return make_client(
        operator_tokens=[OPERATOR], viewer_tokens=[VIEWER], login_attempts_per_minute=3
    )


def test_login_is_429_with_retry_after_once_the_attempts_are_used_up(limited: TestClient) -> None:
    ok = limited.post("/login", data={"token": "op-secret"}, follow_redirects=False)
    assert ok.status_code == 303
    limited.cookies.clear()  # the guesses come from another browser on this address
    for i in range(3):
        wrong = limited.post("/login", data={"token": f"guess{i}"}, follow_redirects=False)
        assert wrong.status_code == 401
    refused = limited.post("/login", data={"token": "guess3"}, follow_redirects=False)
    assert refused.status_code == 429 and "set-cookie" not in refused.headers
    assert 55 <= int(refused.headers["retry-after"]) <= 60
    assert "Too many failed sign-ins from this address" in refused.text
    assert "guess3" not in refused.text
    right = limited.post("/login", data={"token": "op-secret"}, follow_redirects=False)
    assert right.status_code == 303  # the operator is not locked out


def test_unknown_bearer_tokens_on_the_api_count_too(limited: TestClient) -> None:
    for _ in range(3):
        assert (
            limited.get("/api/events", headers={"Authorization": "Bearer guess"}).status_code == 401
        )
    refused = limited.get("/api/events", headers={"Authorization": "Bearer guess"})
    assert refused.status_code == 429 and "retry-after" in refused.headers
    assert refused.json()["detail"].startswith("too many failed sign-ins from this address")
    # a request without any token is not a guess: still the plain 401
    assert limited.get("/api/events").status_code == 401
    assert limited.get("/api/events", headers={"Authorization": "Bearer op-secret"}).is_success
    assert (
        limited.post("/login", data={"token": "wrong"}, follow_redirects=False).status_code == 429
    )


def test_wrong_tokens_from_rotating_addresses_are_refused_over_the_api(
    limited: TestClient,
) -> None:
    """Limit 3 a minute per address, so 15 over all: 40 addresses of 127.0.0.0/8, one guess
    each, and the guesses past 15 are refused; an operator on any of them still gets in."""
    codes = []
    for i in range(40):
        there = TestClient(limited.app, client=(f"127.0.{i}.{i + 1}", 40000 + i))
        codes.append(
            there.get("/api/events", headers={"Authorization": f"Bearer g{i}"}).status_code
        )
    assert codes.count(401) == 15 and codes.count(429) == 25
    there = TestClient(limited.app, client=("127.0.99.1", 1))
    assert there.get("/api/events", headers={"Authorization": "Bearer op-secret"}).is_success


def test_unknown_tokens_on_the_websocket_count_and_close_4429(limited: TestClient) -> None:
    limited.post(
        "/api/deployments", json=nixl_1p1d(), headers={"Authorization": "Bearer op-secret"}
    )
    codes = []
    for _ in range(4):
        with (
            pytest.raises(WebSocketDisconnect) as err,
            limited.websocket_connect("/ws/deployments/pd?token=guess") as ws,
        ):
            ws.receive_text()
        codes.append(err.value.code)
    assert codes == [4401, 4401, 4401, 4429]
    with limited.websocket_connect("/ws/deployments/pd?token=op-secret") as ws:
        assert ws.receive_json()  # the right token still connects
    assert "too many failed sign-ins" in err.value.reason


def test_the_default_is_ten_a_minute() -> None:
    assert Settings().login_attempts_per_minute == 10
    assert Settings(login_attempts_per_minute="25").login_attempts_per_minute == 25
    with pytest.raises(ValueError):
        Settings(login_attempts_per_minute=0)


# -- a lockout never shuts out a right token (issue 13 finding 9, issue 39 weak 7) --------


def test_a_browser_signed_in_before_a_lockout_keeps_working(limited: TestClient) -> None:
    assert limited.post("/login", data={"token": "op-secret"}, follow_redirects=False).is_redirect
    device = dict(limited.cookies)  # the session and the device cookie
    assert set(device) == {"pdctl_token", "pdctl_device"}
    limited.cookies.clear()
    for i in range(5):  # someone else on this address guesses
        limited.post("/login", data={"token": f"guess{i}"}, follow_redirects=False)
    assert limited.post("/login", data={"token": "guess5"}).status_code == 429
    # A CLI on the same address, with no device cookie, is not locked out either.
    assert limited.get("/api/events", headers={"Authorization": "Bearer op-secret"}).is_success
    limited.cookies.update(device)
    assert limited.get("/").status_code == 200
    assert limited.get("/api/events").status_code == 200
    again = limited.post("/login", data={"token": "op-secret"}, follow_redirects=False)
    assert again.status_code == 303


def test_a_lockout_refuses_every_guess_and_no_right_token(limited: TestClient) -> None:
    assert limited.post("/login", data={"token": "view-secret"}, follow_redirects=False).is_redirect
    for i in range(3):
        wrong = limited.post("/login", data={"token": f"guess{i}"}, follow_redirects=False)
        assert wrong.status_code == 401
    assert limited.post("/login", data={"token": "guess-again"}).status_code == 429
    for token in ("op-secret", "view-secret"):
        assert limited.post("/login", data={"token": token}, follow_redirects=False).is_redirect


def test_a_forged_or_old_device_cookie_is_worth_nothing() -> None:
    from web.security import device

    clock, wall = ManualClock(), ManualClock()
    book = TokenBook(
        Settings(operator_tokens=[OPERATOR], login_attempts_per_minute=1), clock=clock, wall=wall
    )
    actor = book.check("op-secret", "a")
    cookie = book.device_cookie(actor)
    assert book.device_holder(cookie) == "operator:alice"
    forged = device.issue(device.device_key(["guess"]), "operator:alice", wall.now)
    assert book.device_holder(forged) is None
    assert book.device_holder(cookie.replace(".1000.", ".1001.")) is None  # tampered
    book.check("nope", "a")
    with pytest.raises(Exception, match="too many"):
        book.check("nope", "a", cookie)  # a cookie lets no guess through
