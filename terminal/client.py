"""The verbs' one HTTP client of `pdctl serve`'s REST API: JSON in and out, the bearer token,
and every failure as an `ApiError` whose message is one line and whose exit code is the
documented one (terminal/exits.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from terminal import exits
from terminal.config import TOKEN_ENV, Target

TIMEOUT_S = 15.0


class ApiError(RuntimeError):
    """One line saying what went wrong, and the exit code it maps to."""

    def __init__(
        self, message: str, code: int, status: int | None = None, detail: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.detail = detail  # the API's `detail`, when it answered one


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ApiClient:
    target: Target
    timeout_s: float = TIMEOUT_S

    def get(self, path: str, **query: Any) -> Any:
        return self.call("GET", path, query=query).body

    def post(self, path: str, body: Any = None, **query: Any) -> Any:
        return self.call("POST", path, body, query=query).body

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """One request; an `ApiError` for anything but a 2xx JSON (or empty) answer."""
        url = self.url(path, query)
        sent = {"Accept": "application/json", **(headers or {})}
        if self.target.token:
            sent["Authorization"] = f"Bearer {self.target.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=sent, method=method)
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as response:
                raw = response.read()
                answered = {k.lower(): v for k, v in response.headers.items()}
                return Answer(response.status, self._json(raw), answered)
        except urllib.error.HTTPError as err:
            raise self._refused(err, path) from None
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            raise ApiError(
                f"--server {self.target.server}: cannot reach it ({why})", exits.UNREACHABLE
            ) from None

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        kept = {k: v for k, v in (query or {}).items() if v is not None}
        tail = f"?{urllib.parse.urlencode(kept, doseq=True)}" if kept else ""
        return f"{self.target.server}{path}{tail}"

    def _json(self, raw: bytes) -> Any:
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(
                f"--server {self.target.server}: its answer is not JSON (not pdctl serve?)",
                exits.UNREACHABLE,
            ) from None

    def _refused(self, err: urllib.error.HTTPError, path: str) -> ApiError:
        detail = _detail(err)
        if not_ours(err.code, detail):
            return ApiError(
                f"--server {self.target.server}: answered {err.code} {err.reason} for {path} "
                "(not pdctl serve?)",
                exits.UNREACHABLE,
            )
        said = describe(detail) or err.reason
        hint = f" (set {TOKEN_ENV})" if err.code == 401 and not self.target.token else ""
        return ApiError(f"{err.code}: {said}{hint}", exits.for_status(err.code), err.code, detail)


def not_ours(status: int, detail: Any) -> bool:
    """A 404 or 405 with no message of its own: no such route, so another server (a proxy, an
    engine) or none of pdctl's, where pdctl serve names what it did not find."""
    bare = detail is None or detail in ("Not Found", "Method Not Allowed")
    return status in (404, 405) and bare


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port made explicit."""
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or default


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    """Redirects are followed, but the bearer token goes only to the origin it was given
    for: urllib copies every header to wherever a redirect points, so a server (or anyone
    answering for it) could send the CLI, token and all, to another host."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and origin(newurl) != origin(req.full_url):
            for name in ("Authorization", "Cookie", "Proxy-Authorization"):
                new.remove_header(name)
        return new


_OPENER = urllib.request.build_opener(_TokenStaysHome())


def _detail(err: urllib.error.HTTPError) -> Any:
    try:
        return json.loads(err.read()).get("detail")
    except (ValueError, AttributeError, OSError):
        return None


def describe(detail: Any) -> str:
    """The API's `detail` as one line: the message, or each item's field and message (FastAPI's
    422 items, the store's spec problems) joined with '; '."""
    return "; ".join(problems(detail))


def problems(detail: Any) -> list[str]:
    """The API's `detail` as lines: the message, or one `field: message` per item."""
    if isinstance(detail, str):
        return [" ".join(detail.split())]
    if not isinstance(detail, list):
        return []
    said = []
    for item in detail:
        if not isinstance(item, dict):
            continue
        loc = [str(p) for p in item.get("loc", []) if p not in ("body", "query", "path")]
        msg = " ".join(str(item.get("msg", "")).split())
        said.append(f"{'.'.join(loc)}: {msg}" if loc else msg)
    return said
