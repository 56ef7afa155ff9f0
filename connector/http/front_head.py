"""Which client requests the proxy's own front (connector/http/front.py) reads itself, and their
heads: pure, bytes in. Only the plainest form of the two completion routes qualifies; every
other request, and every head with anything unusual in it, goes to aiohttp byte for byte, so
what aiohttp accepts, refuses or answers is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from multidict import CIMultiDict, CIMultiDictProxy

HOT_LINES = frozenset({b"POST /v1/completions HTTP/1.1", b"POST /v1/chat/completions HTTP/1.1"})
MAX_HEAD = 8190  # aiohttp's max_line_size: a longer head is aiohttp's to judge
MAX_LENGTH_DIGITS = 18
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(rb"[\t\x20-\x7e]*")
# headers whose meaning the front does not implement: such a request is aiohttp's
_NOT_READ_HERE = frozenset(
    {b"transfer-encoding", b"expect", b"upgrade", b"content-encoding", b"trailer"}
)


# Header lines already read (a client sends the same few with every request), not those
# whose value changes per request nor those that carry a secret.
MAX_KNOWN_LINES = 1024
VARYING_HEADERS = frozenset(
    {
        b"x-request-id",
        b"request-id",
        b"date",
        b"traceparent",
        b"cookie",
        b"authorization",
        b"x-pdctl-canary",
        b"x-pdctl-pair",
    }
)
_KNOWN: dict[bytes, tuple[str, str, bool]] = {}


@dataclass(slots=True, frozen=True)
class RequestHead:
    path: str
    headers: CIMultiDictProxy[str]
    length: int  # Content-Length
    close: bool  # `Connection: close`: the connection ends after the answer


def _read_line(lower: bytes, name: bytes, value: bytes) -> tuple[str, str, bool] | None:
    """A valid header line other than Content-Length: (name, value, says close), or None
    when its header makes the request aiohttp's."""
    if lower in _NOT_READ_HERE:
        return None
    close = False
    if lower == b"connection":
        tokens = {t.strip(b" \t").lower() for t in value.split(b",")}
        if b"upgrade" in tokens:
            return None
        close = b"close" in tokens
    return name.decode("ascii"), value.decode("ascii"), close


def may_be_hot(start: bytes) -> bool:
    """The first bytes of a head (no line end yet) could still open a hot request line."""
    return any(line.startswith(start) for line in HOT_LINES)


def line_is_hot(line: bytes) -> bool:
    return line in HOT_LINES


def parse_hot_head(raw: bytes) -> RequestHead | None:
    """The head of a hot request (`raw`: the bytes before the blank line), or None when the
    front does not read this request itself."""
    if len(raw) > MAX_HEAD or not raw.isascii():
        return None
    lines = raw.split(b"\r\n")
    if lines[0] not in HOT_LINES:
        return None
    headers: CIMultiDict[str] = CIMultiDict()
    length: int | None = None
    close = False
    for line in lines[1:]:
        known = _KNOWN.get(line)
        if known is None:
            name, colon, value = line.partition(b":")
            if not colon or _TOKEN.fullmatch(name) is None:
                return None  # obs-fold, a bare CR or LF, a bad name: aiohttp's words for it
            value = value.strip(b" \t")
            if _FIELD_VALUE.fullmatch(value) is None:
                return None
            lower = name.lower()
            if lower == b"content-length":
                if length is not None or not value.isdigit() or len(value) > MAX_LENGTH_DIGITS:
                    return None
                length = int(value)
                headers.add(name.decode("ascii"), value.decode("ascii"))
                continue
            read = _read_line(lower, name, value)
            if read is None:
                return None
            if len(_KNOWN) < MAX_KNOWN_LINES and lower not in VARYING_HEADERS:
                _KNOWN[line] = read
            known = read
        close = close or known[2]
        headers.add(known[0], known[1])
    if length is None:
        return None
    path = lines[0].split(b" ", 2)[1].decode("ascii")
    return RequestHead(path, CIMultiDictProxy(headers), length, close)
