"""The proxy's error tree; every error becomes one OpenAI-style JSON body in one place.

    ProxyError                  500  anything the proxy itself cannot do
     +- BadRequest              400  the client's body cannot be served (names the field)
     |   +- UpstreamRefused     4xx  the engine refused the body (400, 404, 413, 422): its
     |                              status and message, naming the leg and the instance
     +- Unauthorized            401  admin API without the right bearer token
     +- NotFound                404  admin API: no such instance or group
     +- BodyTooSlow             408  a request body not received within --body-timeout
     +- TooLarge                413  a request body over --max-body-bytes
     +- Unavailable             503  nothing can serve now; carries Retry-After
     |   +- NoInstance          503  no healthy, undrained instance (or pair) for this request
     |   +- HoldRejected        503  hold queue full, or the hold deadline passed
     +- UpstreamError           502  a leg failed; names the leg (prefill|decode) and its instance,
         |                          and its `cause` (connector/legs/retry.py: refused, reset,
         |                          status, garbage, timeout, first_byte) for the retry decision
         +- UpstreamTimeout     502  a leg did not answer in time

    UpstreamFault               a leg's connection failed (raised by the connector/http/ client,
     |                          the one seam that speaks to upstreams; the relay turns it into
     |                          the UpstreamError naming the leg, its instance and `cause`)
     +- ConnectFailed           refused: no connection was made, nothing reached the instance
     +- ConnectTimedOut         timeout: no connection within the connect timeout (a loaded
     |                          host: it does not mark the instance down as a refusal does)
     +- ConnectionLost          reset: closed or reset before the answer ended
     +- BadResponse             reset: bytes that are not an HTTP/1.1 response (the parser's
                                refusal, a head or trailer section too long, too many fields);
                                the connection is closed, never reused

The body is `{"error": {"message", "type", "code"}}` as vLLM's server answers.
"""

from __future__ import annotations

import json


class ProxyError(Exception):
    status = 500
    type = "InternalServerError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        return {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "code": self.status}}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


class BadRequest(ProxyError):
    status = 400
    type = "BadRequestError"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def body(self) -> dict:
        body = super().body()
        if self.field is not None:
            body["error"]["param"] = self.field
        return body


class UpstreamRefused(BadRequest):
    """The client's request as the engine judged it: a client error, not a failed leg."""

    STATUSES = frozenset({400, 404, 413, 422})

    def __init__(
        self, leg: str, instance: str, status: int, message: str, field: str | None = None
    ) -> None:
        super().__init__(message, field)
        self.status = status
        self.type = "NotFoundError" if status == 404 else "BadRequestError"
        self.leg, self.instance = leg, instance

    def body(self) -> dict:
        body = super().body()
        body["error"]["leg"] = self.leg
        body["error"]["instance"] = self.instance
        return body


class Unauthorized(ProxyError):
    status = 401
    type = "AuthenticationError"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class NotFound(ProxyError):
    status = 404
    type = "NotFoundError"


class BodyTooSlow(ProxyError):
    status = 408
    type = "BadRequestError"


class TooLarge(ProxyError):
    status = 413
    type = "BadRequestError"


class Unavailable(ProxyError):
    status = 503
    type = "ServiceUnavailableError"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after)))}


class NoInstance(Unavailable):
    pass


class HoldRejected(Unavailable):
    pass


class UpstreamError(ProxyError):
    status = 502
    type = "BadGatewayError"

    def __init__(self, leg: str, instance: str, detail: str, cause: str = "status") -> None:
        super().__init__(f"{leg} leg to {instance} failed: {detail}")
        self.leg = leg
        self.instance = instance
        self.cause = cause

    def body(self) -> dict:
        body = super().body()
        body["error"]["leg"] = self.leg
        body["error"]["instance"] = self.instance
        return body


class UpstreamTimeout(UpstreamError):
    type = "GatewayTimeoutError"

    def __init__(self, leg: str, instance: str, seconds: float, cause: str = "timeout") -> None:
        what = "no first byte" if cause == "first_byte" else "no answer"
        super().__init__(leg, instance, f"{what} within {seconds:g} s", cause)


class UpstreamFault(Exception):
    """A leg's connection to its upstream failed; `cause` as connector/retry.py reads it."""

    cause = "reset"


class ConnectFailed(UpstreamFault):
    cause = "refused"


class ConnectTimedOut(UpstreamFault):
    """No connection within the connect timeout: a loaded host, not a refusal (the instance
    is not marked down for it)."""

    cause = "timeout"


class ConnectionLost(UpstreamFault):
    pass


class BadResponse(UpstreamFault):
    pass
