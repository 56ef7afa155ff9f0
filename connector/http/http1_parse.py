"""Pure HTTP/1.1 response framing for the proxy's own upstream client (connector/http/upstream.py):
the response head, and the body's framing undone as bytes arrive (chunked, a declared length,
or until the connection closes). Bytes in, payload bytes out; no sockets.

What it refuses, it refuses as `FramingError` with aiohttp's words for the same fault, so the
legs' error events read as they did through aiohttp's parser.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

MAX_HEAD_BYTES = 65536  # aiohttp's read buffer: a head longer than this is refused
MAX_SIZE_LINE = 8190  # aiohttp's max_line_size, for a chunk-size line with its extensions
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) (\d{3})(?: (.*))?")
_HEXDIGITS = re.compile(rb"[0-9a-fA-F]+")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)
MAX_KNOWN_SIZES = 4096
_SIZES: dict[bytes, int] = {}  # plain size lines already read (token chunks repeat sizes)
# Header lines already read: an engine answers every request with the same few lines, and
# reading one again costs a regex and two decodes. Not those whose value changes per answer.
MAX_KNOWN_LINES = 1024
VARYING_HEADERS = frozenset(
    {b"date", b"content-length", b"x-request-id", b"request-id", b"set-cookie", b"etag", b"age"}
)
_LINES: dict[bytes, tuple[bytes, bytes, str, str]] = {}


class FramingError(Exception):
    """The upstream's bytes are not an HTTP/1.1 response the proxy can read. `payload`: what
    the same bytes held before the fault (aiohttp's reader drops it too, raising first)."""

    payload = b""


@dataclass(slots=True)
class ResponseHead:
    status: int
    reason: str
    minor: int  # HTTP/1.<minor>
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names, first value kept
    chunked: bool = False
    length: int | None = None  # Content-Length, when not chunked
    keep_alive: bool = True
    encoding: str | None = None  # Content-Encoding other than identity

    def get(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


def parse_head(raw: bytes) -> ResponseHead:
    """The response head, `raw` being everything before the blank line that ends it."""
    lines = raw.split(b"\r\n")
    match = _STATUS_LINE.fullmatch(lines[0])
    if match is None:
        raise FramingError(f"Invalid status line: {lines[0][:60]!r}")
    head = ResponseHead(int(match[2]), (match[3] or b"").decode("latin-1"), int(match[1]))
    lengths: set[bytes] = set()
    codings: list[bytes] = []
    connection: list[bytes] = []
    for line in lines[1:]:
        known = _LINES.get(line)
        lower, value, key, text = known if known is not None else _header_line(line)
        if lower == b"content-length":
            lengths.add(value)
        elif lower == b"transfer-encoding":
            codings += [c.strip().lower() for c in value.split(b",")]
        elif lower == b"connection":
            connection += [c.strip().lower() for c in value.split(b",")]
        head.headers.setdefault(key, text)
    if codings:
        if codings[-1] != b"chunked" or codings.count(b"chunked") > 1:
            raise FramingError("Request has invalid `Transfer-Encoding`")
        head.chunked = True
        head.keep_alive = not lengths  # both framings: read it chunked, never reuse
    elif lengths:
        if len(lengths) > 1 or _digits(next(iter(lengths))) is None:
            raise FramingError("invalid character in Content-Length header")
        head.length = _digits(next(iter(lengths)))
    if head.status in (204, 304) or 100 <= head.status < 200:
        head.chunked, head.length = False, 0
    if head.minor == 0 or b"close" in connection:
        head.keep_alive = False
    elif not head.chunked and head.length is None:
        head.keep_alive = False  # its body ends when the connection does
    coding = head.get("content-encoding").strip().lower()
    head.encoding = coding if coding and coding != "identity" else None
    return head


def _header_line(line: bytes) -> tuple[bytes, bytes, str, str]:
    """One header line read: (lower-case name, value, both as str); kept in _LINES when its
    name is not one whose value changes from answer to answer."""
    name, colon, value = line.partition(b":")
    if not colon or _TOKEN.fullmatch(name) is None:
        raise FramingError(f"Invalid header line: {line[:60]!r}")
    value = value.strip(b" \t")
    lower = name.lower()
    read = (lower, value, lower.decode("latin-1"), value.decode("latin-1"))
    if lower not in VARYING_HEADERS and len(_LINES) < MAX_KNOWN_LINES:
        _LINES[line] = read
    return read


def _digits(value: bytes) -> int | None:
    return int(value) if value.isdigit() and value.isascii() else None


class Body:
    """A response body's framing undone: `feed` takes bytes, returns the payload among them."""

    __slots__ = (
        "_buf",
        "_chunked",
        "_decoder",
        "_length",
        "_need",
        "_state",
        "extra",
        "framed",
        "until_close",
    )

    def __init__(self, head: ResponseHead) -> None:
        self._buf = b""
        self._chunked = head.chunked
        self.until_close = not head.chunked and head.length is None
        self._need = self._length = 0 if head.chunked else head.length or 0
        if head.chunked:
            self._state = _SIZE
        else:
            self._state = _DATA if self.until_close or self._need else _DONE
        self._decoder = _decoder(head.encoding) if head.encoding else None
        self.extra = False  # bytes came after the body ended: the connection cannot be reused
        # the bytes of the last feed when they were exactly one chunk, framed as the proxy
        # frames it for the client (lowercase hex, no extension: a size line in _SIZES)
        self.framed: bytes | None = None

    @property
    def done(self) -> bool:
        return self._state == _DONE

    def feed(self, data: bytes) -> bytes:
        if self._state == _SIZE and not self._buf and self._decoder is None:
            # The common piece: exactly one whole chunk with a size line seen before.
            end = data.find(b"\r\n")
            size = _SIZES.get(data[:end]) if end > 0 else None
            if size is not None and len(data) == end + size + 4 and data.endswith(b"\r\n"):
                self.framed = data
                return data[end + 2 : end + 2 + size]
        self.framed = None
        if self._state == _DONE:
            self.extra = self.extra or bool(data)
            return b""
        if self._chunked:
            payload = self._dechunk(data)
        elif self.until_close:
            payload = data
        else:
            payload = data if len(data) <= self._need else data[: self._need]
            self.extra = len(data) > self._need
            self._need -= len(payload)
            if not self._need:
                self._state = _DONE
        if self._decoder is not None and payload:
            return self._decoder.decompress(payload)
        return payload

    def feed_eof(self) -> bytes:
        """The connection closed: the rest of an until-close body, or the error aiohttp gives."""
        if self.until_close:
            self._state = _DONE
            return self._decoder.flush() if self._decoder is not None else b""
        if self._state == _DONE:
            return b""
        if self._chunked:
            raise FramingError(
                "Response payload is not completed: <TransferEncodingError: 400, "
                "message='Not enough data to satisfy transfer length header.'>"
            )
        raise FramingError(
            "Response payload is not completed: <ContentLengthError: 400, message='Not enough "
            f"data to satisfy content length header (received {self._length - self._need} of "
            f"{self._length} bytes).'>"
        )

    def _dechunk(self, data: bytes) -> bytes:
        if self._buf:
            data, self._buf = self._buf + data, b""
        out: list[bytes] = []
        try:
            self._dechunk_into(out, data)
        except FramingError as exc:
            exc.payload = b"".join(out)
            raise
        return out[0] if len(out) == 1 else b"".join(out)

    def _dechunk_into(self, out: list[bytes], data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            state = self._state
            if state == _DATA:
                take = min(self._need, n - i)
                out.append(data[i : i + take] if take < n else data)
                i += take
                self._need -= take
                if not self._need:
                    self._state = _DATA_END
            elif state == _SIZE:
                end = data.find(b"\r\n", i)
                if end < 0:
                    if n - i > MAX_SIZE_LINE:
                        raise FramingError("Chunk size line too long")
                    self._buf = data[i:]
                    break
                size = _chunk_size(data[i:end])
                i = end + 2
                self._state, self._need = (_DATA, size) if size else (_TRAILER, 0)
            elif state == _DATA_END:
                if n - i < 2:
                    self._buf = data[i:]
                    break
                if data[i : i + 2] != b"\r\n":
                    raise FramingError("Chunk size mismatch: expected CRLF after chunk")
                i += 2
                self._state = _SIZE
            elif state == _TRAILER:
                end = data.find(b"\r\n", i)
                if end < 0:
                    if n - i > MAX_SIZE_LINE:
                        raise FramingError("Trailer line too long")
                    self._buf = data[i:]
                    break
                self._state = _DONE if end == i else _TRAILER
                i = end + 2
            else:  # _DONE
                self.extra = True
                break


def _chunk_size(line: bytes) -> int:
    known = _SIZES.get(line)
    if known is not None:
        return known
    size = line.split(b";", 1)[0].rstrip(b" \t")
    if _HEXDIGITS.fullmatch(size) is None:
        raise FramingError(f"Invalid chunk size: {line[:40]!r}")
    n = int(size, 16)
    if n and len(_SIZES) < MAX_KNOWN_SIZES and line == b"%x" % n:
        _SIZES[line] = n
    return n


def _decoder(coding: str) -> zlib._Decompress:
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()
    raise FramingError(f"Unsupported Content-Encoding: {coding[:40]!r}")
