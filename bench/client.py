"""The bench's one door to the server: streamed OpenAI requests over one aiohttp session.

Each request becomes a RequestRecord, never an exception: HTTP errors, error events in the
stream, cut connections and timeouts are failed records carrying the reason, and every request
is bounded by `--timeout` so a stuck server cannot hang the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import aiohttp

from bench.config import BenchConfig
from bench.records import RequestRecord
from bench.sse import NOTHING, LineSplitter, error_message, parse_line, ttft_parts
from domain.measures.ttft_parts import PARTS_HEADER
from domain.workload.datasets import BenchRequest

# PARTS_HEADER: a pdctl proxy adds the TTFT's parts after [DONE]; other servers ignore it
AFTER_DONE_S = 1.0
JSON_HEADERS = {"Content-Type": "application/json", PARTS_HEADER: "1"}


class ServerUnreachable(Exception):
    """The server did not answer the model query; the run cannot start."""


def request_payload(config: BenchConfig, model: str, request: BenchRequest) -> dict[str, Any]:
    """The JSON body: streamed, usage included, exactly `output_len` tokens unless EOS is on."""
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": request.output_len,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": config.ignore_eos,
    }
    if config.endpoint == "chat":
        payload["messages"] = [m.as_openai() for m in request.messages]
    elif config.prompt_token_ids:
        payload["prompt"] = request.prompt_ids
    else:
        payload["prompt"] = request.prompt_text()
    return payload


def open_session(config: BenchConfig) -> aiohttp.ClientSession:
    """One session for the whole run: connections are reused, limited only by concurrency."""
    connector = aiohttp.TCPConnector(limit=config.max_concurrency or 0, force_close=False)
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=min(config.timeout, 30.0), sock_read=config.timeout
    )
    return aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)


async def fetch_model(session: aiohttp.ClientSession, config: BenchConfig) -> str:
    """The first model the server lists at /v1/models (used when --model is not given)."""
    try:
        async with asyncio.timeout(min(config.timeout, 10.0)):
            async with session.get(config.models_url) as response:
                if response.status != 200:
                    body = await response.text()
                    raise ServerUnreachable(
                        f"GET {config.models_url} answered HTTP {response.status}: {body[:200]}"
                    )
                listing = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise ServerUnreachable(f"cannot reach {config.models_url}: {_describe(exc)}") from None
    models = listing.get("data") if isinstance(listing, dict) else None
    if not models:
        raise ServerUnreachable(f"{config.models_url} lists no models; pass --model")
    return str(models[0]["id"])


async def fetch_metrics(session: aiohttp.ClientSession, config: BenchConfig) -> str | None:
    """The server's /metrics text, or None: a server without them costs the run nothing."""
    url = config.base_url.rstrip("/") + "/metrics"
    try:
        async with asyncio.timeout(5.0), session.get(url) as response:
            return await response.text() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


class BenchClient:
    """Sends requests and times their streams; `max_concurrency` caps requests in flight.

    Bodies are encoded before the run (`prepare`), so the send path only writes bytes: the
    prompt's text is not decoded, nor its JSON built, on the loop being timed."""

    def __init__(self, session: aiohttp.ClientSession, config: BenchConfig, model: str) -> None:
        self._session = session
        self._config = config
        self._model = model
        self._slots = asyncio.Semaphore(config.max_concurrency or 1)
        self._limited = config.max_concurrency is not None
        self._bodies: dict[int, bytes] = {}
        self._headers = {**JSON_HEADERS, **dict(config.headers)}

    def prepare(self, requests: Sequence[BenchRequest], indices: Iterable[int]) -> None:
        """Encode the bodies of `requests[i]` for each i in `indices` ahead of the run."""
        for index in indices:
            self._bodies[index] = self.body(requests[index])

    def body(self, request: BenchRequest) -> bytes:
        payload = request_payload(self._config, self._model, request)
        return json.dumps(payload, separators=(",", ":")).encode()

    async def send(self, request: BenchRequest, index: int = 0) -> RequestRecord:
        if not self._limited:
            return await self._timed(request, index)
        async with self._slots:
            return await self._timed(request, index)

    async def _timed(self, request: BenchRequest, index: int) -> RequestRecord:
        body = self._bodies.pop(index, None) or self.body(request)
        record = RequestRecord(prompt_tokens=request.prompt_len, index=index)
        # Like vLLM's `st`: taken just before the request is handed to aiohttp.
        record.start = time.perf_counter()
        try:
            async with asyncio.timeout(self._config.timeout):
                await self._stream(body, record)
        except TimeoutError:
            record.ok = False
            record.error = f"timed out after {self._config.timeout:g} s"
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: an over-long SSE line
            record.ok = False
            record.error = _describe(exc)
        if not record.ok:
            record.e2el = time.perf_counter() - record.start
        return record

    async def _stream(self, body: bytes, record: RequestRecord) -> None:
        """Time each token by the arrival of the chunk that carried it (read before parsing);
        a request's latency ends at its last token, as vLLM's does (not at [DONE])."""
        async with self._session.post(
            self._config.api_url, data=body, headers=self._headers
        ) as response:
            record.status = response.status
            if response.status != 200:
                record.error = await _http_error(response)
                return
            last_token = record.start
            tokens = 0
            lines = LineSplitter()
            done = False
            after: list[bytes] = []  # the lines that came after [DONE] in its chunk
            async for chunk in response.content.iter_any():
                now = time.perf_counter()
                fed = lines.feed(chunk)
                for i, line in enumerate(fed):
                    event = parse_line(line)
                    if event is NOTHING:
                        continue
                    if event.error is not None:
                        record.error = event.error
                        return
                    if event.token:
                        if tokens == 0:
                            record.ttft = now - record.start
                        else:
                            record.itl.append(now - last_token)
                        last_token = now
                        tokens += 1
                    if event.prompt_tokens is not None:
                        record.prompt_tokens = event.prompt_tokens
                    if event.completion_tokens is not None:
                        record.output_tokens = event.completion_tokens
                    if event.engine_metrics is not None:
                        record.engine_metrics = event.engine_metrics
                    if event.done:
                        done, after = True, fed[i + 1 :]
                        break
                if done:
                    break
            if done:  # a pdctl proxy sends the TTFT's parts after [DONE], then ends
                record.ttft_parts = await _parts_after_done(response, lines, after)
            elif parse_line(lines.rest()).done:
                done = True
            if not done:
                record.error = "stream ended before [DONE]"
                return
        if tokens == 0:
            record.error = "stream carried no tokens"
            return
        record.output_tokens = record.output_tokens or tokens
        record.e2el = last_token - record.start
        record.ok = True


async def _parts_after_done(
    response: aiohttp.ClientResponse, lines: LineSplitter, after: list[bytes]
) -> dict[str, Any] | None:
    """Read the rest of the stream (a comment line at most) for the TTFT's parts."""
    rest = b"\n".join([*after, lines.rest()])
    # bounded: a server that holds the stream open after [DONE] costs this request 1 s at most
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(AFTER_DONE_S):
            async for chunk in response.content.iter_any():
                rest += chunk
                if len(rest) > 4096:
                    break
    for line in rest.split(b"\n"):
        if (parts := ttft_parts(line.strip(b"\r"))) is not None:
            return parts
    return None


async def _http_error(response: aiohttp.ClientResponse) -> str:
    body = await response.text(errors="replace")
    try:
        message = error_message(json.loads(body))
    except ValueError:
        message = body.strip()[:300]
    return f"HTTP {response.status}: {message}" if message else f"HTTP {response.status}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
