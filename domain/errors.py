"""pdctl's error tree. Each error carries an HTTP status, a title and a plain message; the
control plane turns any of them into JSON, an htmx fragment or a page in one place
(web/errors.py `render`). The root and the branches every floor raises live here; a leaf
lives with the code that raises it (in brackets).

    PdctlError                   500  anything pdctl itself cannot do
     +- BenchStartFailed         500  pdctl bench could not be started
                                       [services/bench_runs/runs.py]
     +- BadRequest               400  a malformed header the API reads (If-Match)
     |   +- HostRefused          400  a Host not allowed without tokens     [web/security/hosts.py]
     +- Unauthorized             401  no token, or an unknown one           [web/errors.py]
     +- Forbidden                403  a viewer asking to change something   [web/errors.py]
     |   +- CrossOriginRefused   403  a write from another site             [web/security/csrf.py]
     +- NotFound                 404  no such deployment, revision, instance, switch, run
     |   +- SupervisorError      404  no such supervised deployment or instance [controller]
     +- Conflict                 409  a name taken, a run already going
     |   +- InvalidTransition    409  not in the state it is in: not started, still running
     |   |   +- SwitchBusy       409  a switch going, or an instance not RUNNING [controller]
     |   +- SwitchRejected       409  this deployment cannot switch that way    [controller]
     |   +- PortsExhausted       409  no room left in the port range            [controller]
     |   +- Unreadable           409  a stored revision today's rules refuse    [state/errors.py]
     |   +- StaleRevision        409  an edit from a revision no longer current [state/errors.py]
     |   +- ChangeInProgress     409  any other change while one is in progress [state/errors.py]
     +- TooLarge                 413  a request body over the limit         [web/errors.py]
     +- NotJson                  415  an API body that is not JSON          [web/errors.py]
     +- ConfigError              422  rules broken; each Problem names its field (FastAPI's shape)
     |   +- SpecInvalid          422  in a deployment spec
     |   +- RequestInvalid       422  FastAPI's own validation of a request [web/errors.py]
     |   +- TooMany              422  too many bench runs for a chart [web/routes/advise/bench.py]
     +- TooManyRequests          429  try again later; carries Retry-After
     |   +- TooManyAttempts      429  failed sign-ins from one address       [web/security/auth.py]
     |   +- PlannerBusy          429  a plan is running already
     [web/routes/advise/plan.py]
     +- UpstreamError            502  a process pdctl drives answered wrongly (a proxy, an engine)
     |   +- ProxyAdminError      502  the proxy's admin API failed          [controller]
     |   +- UpstreamTimeout      504  ... or not in time
     +- Unavailable              503  nothing here can do it (no controller in this control plane)
     |   +- ClusterUnreachable   503  the cluster did not list its nodes now    [controller]
     +- HttpError                4xx  the framework's own (unknown path, method) [web/errors.py]

A leaf adds only what it must: a title, a message built from its fields, headers (ETag,
Retry-After). The proxy keeps its own OpenAI-shaped tree (connector/errors.py): its clients
are OpenAI clients, not pdctl's API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class PdctlError(Exception):
    status = 500
    title = "Internal error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def detail(self) -> object:
        """What `{"detail": ...}` holds: the message, or items naming fields."""
        return self.message

    def headers(self) -> dict[str, str]:
        return {}


class BadRequest(PdctlError):
    status = 400
    title = "Bad request"


class NotFound(PdctlError):
    status = 404
    title = "Not found"


class Conflict(PdctlError):
    status = 409
    title = "Conflict"


class InvalidTransition(Conflict):
    """What was asked cannot happen from the state the thing is in."""

    title = "Not in this state"


@dataclass(frozen=True, slots=True)
class Problem:
    """One broken rule, shaped like an item of FastAPI's 422 detail (loc without "body")."""

    loc: tuple
    msg: str
    type: str = "value_error"


class ConfigError(PdctlError):
    status = 422
    title = "Invalid input"
    where = "body"  # what FastAPI puts first in loc: body, query

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(_said(p) for p in problems))
        self.problems = list(problems)

    @classmethod
    def at(cls, loc: Sequence[str | int], msg: str, type: str = "value_error") -> ConfigError:
        return cls([Problem(tuple(loc), msg, type)])

    def detail(self) -> object:
        return [{"loc": [self.where, *p.loc], "msg": p.msg, "type": p.type} for p in self.problems]


def _said(problem: Problem) -> str:
    field = ".".join(str(part) for part in problem.loc)
    return f"{field}: {problem.msg}" if field else problem.msg


class SpecInvalid(ConfigError):
    title = "Invalid deployment"


class TooManyRequests(PdctlError):
    status = 429
    title = "Too many requests"
    retry_after = 5  # seconds

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class UpstreamError(PdctlError):
    status = 502
    title = "Upstream failed"


class UpstreamTimeout(UpstreamError):
    status = 504
    title = "Upstream timed out"


class Unavailable(PdctlError):
    status = 503
    title = "Unavailable"
