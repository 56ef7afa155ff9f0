"""The error tree (domain/errors.py): one root, each error with its HTTP status and title,
the controller's and the store's errors among them, so no route translates them by hand."""

from __future__ import annotations

import pytest

from controller.clients.proxy_admin import ProxyAdminError
from controller.launch.ports import PortsExhausted
from controller.supervise.supervisor import SupervisorError
from controller.switch.plan import SwitchBusy, SwitchRejected
from domain import errors
from state.errors import ChangeInProgress, StaleRevision, Unreadable


@pytest.mark.parametrize(
    ("kind", "branch", "status"),
    [
        (SupervisorError, errors.NotFound, 404),
        (SwitchRejected, errors.Conflict, 409),
        (SwitchBusy, errors.InvalidTransition, 409),
        (PortsExhausted, errors.Conflict, 409),
        (ProxyAdminError, errors.UpstreamError, 502),
        (Unreadable, errors.Conflict, 409),
        (StaleRevision, errors.Conflict, 409),
        (ChangeInProgress, errors.Conflict, 409),
        (errors.UpstreamTimeout, errors.UpstreamError, 504),
        (errors.SpecInvalid, errors.ConfigError, 422),
    ],
)
def test_the_controllers_and_the_stores_errors_carry_their_status(kind, branch, status):
    assert issubclass(kind, branch) and issubclass(kind, errors.PdctlError)
    assert kind.status == status and kind.title


def test_a_switch_refused_is_still_one_when_busy():
    assert issubclass(SwitchBusy, SwitchRejected)  # the runner catches SwitchRejected


def test_a_config_error_names_each_field_in_its_message_and_detail():
    error = errors.ConfigError(
        [errors.Problem(("slo", "ttft_ms"), "must be > 0"), errors.Problem((), "two groups")]
    )
    assert error.message == "slo.ttft_ms: must be > 0; two groups"
    assert error.detail() == [
        {"loc": ["body", "slo", "ttft_ms"], "msg": "must be > 0", "type": "value_error"},
        {"loc": ["body"], "msg": "two groups", "type": "value_error"},
    ]


def test_a_config_error_at_one_field_of_the_query():
    class QueryError(errors.ConfigError):
        where = "query"

    error = QueryError.at(("ids",), "too many", "too_many")
    assert error.detail() == [{"loc": ["query", "ids"], "msg": "too many", "type": "too_many"}]
    assert error.status == 422 and error.message == "ids: too many"


def test_too_many_requests_says_when_to_come_back():
    assert errors.TooManyRequests("busy").headers() == {"Retry-After": "5"}
