"""Upstream calls: the one shared httpx client, bearer tokens read at call time, and the translation of
every httpx outcome into a `Completion` or an `UpstreamError` (SPEC §7).

A `base_url` that is a path (`/v1`) is served in-process by the wrapped ASGI app (middleware, demo).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
import httpx
import msgspec
from starlette.types import ASGIApp

from ._asgi_call import asgi_stream
from ._config import DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES
from ._exceptions import (
    ServerError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ._limits import ResponseTooLarge, limit_chunks, post_limited, sent
from ._redact import redact, redact_bytes, secret_values
from ._resolve import StageTarget
from ._retry import parse_retry_after
from ._sse import StreamIncomplete, iter_batches
from ._transport import network_client

logger = logging.getLogger("adapter_critic")

IN_PROCESS_ORIGIN = "http://in-process.adapter-critic"
_MAX_CONNECTIONS = 256


class Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: Usage | None) -> None:
        """Count `other` in (an upstream that reported no usage counts zeros)."""
        if other is not None:
            self.prompt_tokens += other.prompt_tokens
            self.completion_tokens += other.completion_tokens
            self.total_tokens += other.total_tokens


class _Message(msgspec.Struct):
    content: str | None = None
    tool_calls: list[Any] | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class Completion(msgspec.Struct):
    """The parts of an upstream chat.completion the workflows read."""

    choices: list[_Choice]
    usage: Usage | None = None

    @property
    def content(self) -> str | None:
        return self.choices[0].message.content

    @property
    def tool_calls(self) -> list[Any] | None:
        return self.choices[0].message.tool_calls or None

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason


class _ErrorDetail(msgspec.Struct):
    message: str | None = None


class _ErrorEnvelope(msgspec.Struct):
    error: _ErrorDetail


_completion_decoder = msgspec.json.Decoder(Completion)
_envelope_decoder = msgspec.json.Decoder(_ErrorEnvelope)
_encoder = msgspec.json.Encoder()


class Secrets:
    """The values of the env vars that hold API keys, read fresh each time so keys can rotate."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = tuple(sorted(set(names)))

    def values(self, *extra: str | None) -> list[str]:
        """Every form of every secret (see `_redact`), plus of `extra` (a forwarded caller's token)."""
        return secret_values(self._names, extra)

    def redact(self, text: str, *extra: str | None) -> str:
        return redact(text, self.values(*extra))

    def redact_bytes(self, data: bytes, *extra: str | None) -> bytes:
        return redact_bytes(data, self.values(*extra))


class Upstream:
    """The shared upstream client(s); opened and closed by the app's lifespan.

    One `httpx.AsyncClient` serves every network upstream (over aiohttp when `httpx-aiohttp` is installed, see
    `_transport`); a second one, over `httpx.ASGITransport`, serves path `base_url`s from `in_process_app`.
    A client passed in as `client` is used as is and never closed here (tests, hosts that manage their own pool).
    """

    def __init__(
        self,
        *,
        timeout: float,
        secrets: Secrets,
        client: httpx.AsyncClient | None = None,
        in_process_app: ASGIApp | None = None,
        max_response_bytes: int = DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES,
        connect_timeout: float | None = None,
        max_connections: int = _MAX_CONNECTIONS,
    ) -> None:
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout or timeout)
        self._max_connections = max_connections
        self.secrets = secrets
        self._max_response_bytes = max_response_bytes
        self._given_client = client
        self._in_process_app = in_process_app
        self._client: httpx.AsyncClient | None = None
        self._in_process: httpx.AsyncClient | None = None
        self._opened_lazily = False

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        if self._client is not None:
            return
        limits = httpx.Limits(max_connections=self._max_connections, max_keepalive_connections=self._max_connections)
        self._client = self._given_client or network_client(timeout=self._timeout, limits=limits)
        if self._in_process_app is not None:
            self._in_process = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self._in_process_app), base_url=IN_PROCESS_ORIGIN
            )

    async def aclose(self) -> None:
        client, in_process = self._client, self._in_process
        self._client = self._in_process = None
        if client is not None and client is not self._given_client:
            await client.aclose()
        if in_process is not None:
            await in_process.aclose()

    @property
    def is_open(self) -> bool:
        return self._client is not None

    def _client_for(self, base_url: str) -> httpx.AsyncClient:
        if self._client is None:
            # Starlette does not run a mounted app's lifespan; work anyway, but say how to close cleanly.
            if not self._opened_lazily:
                self._opened_lazily = True
                logger.warning(
                    "adapter_critic: the upstream client was opened on first use because the app's lifespan "
                    "did not run (a mounted app's lifespan is not run by Starlette). Enter "
                    "`app.router.lifespan_context(app)` from the parent's lifespan so it is closed on shutdown."
                )
            self.open()
        if base_url.startswith("/"):
            if self._in_process is None:
                raise ServerError(f"no in-process app serves the relative base_url {base_url!r}")
            return self._in_process
        assert self._client is not None
        return self._client

    # -- calls -----------------------------------------------------------------------------------
    def headers_for(self, target: StageTarget) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if target.forward_client_authorization:
            # The caller's own token, and never the server's key (`forward_client_authorization`).
            if target.client_token:
                headers["authorization"] = f"Bearer {target.client_token}"
            return headers
        key = os.environ.get(target.key_env, "").strip() if target.key_env else ""
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    async def probe(self, target: StageTarget, seconds: float) -> int:
        """`GET {base_url}/models` with the target's credentials (§4), within `seconds`; the HTTP status.

        The body is never read. Raises `httpx.HTTPError`, `TimeoutError`, or `ServerError` (no in-process app)."""
        client = self._client_for(target.base_url)
        headers = {**self.headers_for(target), "accept": "application/json"}
        headers.pop("content-type", None)
        with anyio.fail_after(seconds):
            async with client.stream("GET", f"{target.base_url}/models", headers=headers, timeout=seconds) as response:
                return response.status_code

    def timeout_for(self, target: StageTarget) -> httpx.Timeout:
        """The target's own `timeout_seconds`/`connect_timeout_seconds`, else the server-wide ones."""
        read = target.timeout_seconds or self._timeout.read
        return httpx.Timeout(read, connect=target.connect_timeout_seconds or self._timeout.connect)

    async def complete(self, stage: str, target: StageTarget, body: dict[str, Any]) -> Completion:
        """One non-streaming chat-completions call; raises an `UpstreamError` naming the stage."""
        client = self._client_for(target.base_url)
        url = f"{target.base_url}/chat/completions"
        timeout = self.timeout_for(target)
        try:
            # `fail_after` also bounds clients that ignore httpx timeouts (a given client, in-process ASGI apps).
            with anyio.fail_after(timeout.read):
                # Read incrementally and refused past the limit, never buffered without bound.
                response, content = await post_limited(
                    client,
                    url,
                    limit=self._max_response_bytes,
                    content=_encoder.encode(body),
                    headers=self.headers_for(target),
                    timeout=timeout,
                )
        except (httpx.HTTPError, TimeoutError, ResponseTooLarge) as exc:
            raise self._transport_error(stage, target, exc, failed="could not be reached") from None
        if response.status_code >= 400:
            raise self.status_error(stage, target, response.status_code, content, response.headers)
        if response.status_code != 200:
            raise UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) answered HTTP {response.status_code} "
                "instead of a chat completion.",
                stage=stage,
            )
        try:
            completion = _completion_decoder.decode(content)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
            completion = None
        if completion is None or not completion.choices:
            raise UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) did not answer with an OpenAI chat completion.",
                stage=stage,
            )
        return completion

    @contextlib.asynccontextmanager
    async def stream(
        self, stage: str, target: StageTarget, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[list[bytes]]]:
        """A streaming chat-completions call: yields the upstream's SSE `data` payloads up to `[DONE]`, in
        batches (one list per upstream read).

        The upstream is asked for its usage (`stream_options.include_usage`). Every failure — before the
        first payload or while iterating — is raised as an `UpstreamError` naming the stage, and leaving
        the block closes (or, in-process, cancels) the upstream call.
        """
        content = _encoder.encode({**body, "stream": True, "stream_options": {"include_usage": True}})
        headers = {**self.headers_for(target), "accept": "text/event-stream"}
        url = f"{target.base_url}/chat/completions"
        client = self._client_for(target.base_url)
        timeout = self.timeout_for(target)
        opened: contextlib.AbstractAsyncContextManager[tuple[int, httpx.Headers, AsyncIterator[bytes]]]
        if client is self._in_process and self._in_process_app is not None:
            opened = asgi_stream(
                self._in_process_app, path=url, headers=headers, body=content, read_timeout=timeout.read or 0
            )
        else:
            opened = _network_stream(client, url, headers, content, timeout)
        try:
            async with opened as (status, response_headers, chunks):
                if status >= 400:
                    raise self.status_error(stage, target, status, await _read_some(chunks), response_headers)
                if not response_headers.get("content-type", "").startswith("text/event-stream"):
                    raise UpstreamUnavailable(
                        f"The {stage} stage's upstream ({target.label}) did not answer with an event stream "
                        f"(HTTP {status}, content-type {response_headers.get('content-type')!r}).",
                        stage=stage,
                    )
                yield self._payloads(stage, target, limit_chunks(chunks, self._max_response_bytes))
        except (httpx.HTTPError, TimeoutError, StreamIncomplete, ResponseTooLarge) as exc:
            raise self._transport_error(stage, target, exc) from None

    async def _payloads(
        self, stage: str, target: StageTarget, chunks: AsyncIterator[bytes]
    ) -> AsyncIterator[list[bytes]]:
        try:
            async for batch in iter_batches(chunks):
                yield batch
        except (httpx.HTTPError, TimeoutError, StreamIncomplete, ResponseTooLarge) as exc:
            raise self._transport_error(stage, target, exc) from None

    def _transport_error(
        self, stage: str, target: StageTarget, exc: Exception, *, failed: str = "failed"
    ) -> UpstreamError:
        """The `UpstreamError` for an exception of the transport, the size limit or the event stream."""
        if isinstance(exc, httpx.TimeoutException | TimeoutError):
            return UpstreamTimeout(
                f"The {stage} stage's upstream ({target.label}) did not answer within "
                f"{self.timeout_for(target).read} seconds.",
                stage=stage,
            )
        if isinstance(exc, StreamIncomplete):
            return UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) ended its event stream before `data: [DONE]`.",
                stage=stage,
            )
        if isinstance(exc, ResponseTooLarge):
            return UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) answered, but {exc}.", stage=stage
            )
        return UpstreamUnavailable(
            f"The {stage} stage's upstream ({target.label}) {failed}: "
            f"{self.secrets.redact(type(exc).__name__ + ': ' + str(exc), target.client_token)}",
            stage=stage,
        )

    def status_error(
        self, stage: str, target: StageTarget, status: int, content: bytes, headers: httpx.Headers
    ) -> UpstreamStatusError:
        body = self.secrets.redact_bytes(content, target.client_token)
        detail = _error_message(body)
        said = f": {detail}" if detail else ""
        if status == 429:
            retry_after = headers.get("retry-after")
            rate_limited = UpstreamStatusError(
                f"The {stage} stage's upstream ({target.label}) is rate limited (HTTP 429){said}",
                stage=stage,
                upstream_status=status,
                upstream_body=body,
                status_code=429,
                error_type="rate_limit_error",
                code="rate_limit_exceeded",
                headers={"retry-after": retry_after} if retry_after else {},
            )
            # §7: a 429 carries the upstream's Retry-After instead of `x-should-retry: false`, so SDKs may retry it.
            rate_limited.headers.pop("x-should-retry", None)
            rate_limited.retry_after_seconds = parse_retry_after(headers)  # see `_retry` for what the client gets
            return rate_limited
        failed = UpstreamStatusError(
            f"The {stage} stage's upstream ({target.label}) answered HTTP {status}{said}",
            stage=stage,
            upstream_status=status,
            upstream_body=body,
        )
        failed.retry_after_seconds = parse_retry_after(headers)  # a 503 may say when to come back
        return failed


@contextlib.asynccontextmanager
async def _network_stream(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], content: bytes, timeouts: httpx.Timeout
) -> AsyncIterator[tuple[int, httpx.Headers, AsyncIterator[bytes]]]:
    async with sent(client, "POST", url, content=content, headers=headers, timeout=timeouts) as response:
        yield response.status_code, response.headers, response.aiter_bytes()


async def _read_some(chunks: AsyncIterator[bytes], limit: int = 65536) -> bytes:
    """An error body, read up to `limit` bytes (it is only shown, never relayed whole)."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) >= limit:
            break
    return bytes(data[:limit])


def relay_first_call_error(error: UpstreamError) -> UpstreamError:
    """A 4xx (not 429) on the first API call is the client's own problem: relay the status and envelope."""
    if not isinstance(error, UpstreamStatusError) or not 400 <= error.upstream_status < 500:
        return error
    return error if error.upstream_status == 429 else RelayedUpstreamError(error)


class RelayedUpstreamError(UpstreamStatusError):
    """An upstream 4xx relayed to the client with its own status and (redacted) error envelope."""

    def __init__(self, error: UpstreamStatusError) -> None:
        super().__init__(
            error.message,
            stage=error.stage,
            upstream_status=error.upstream_status,
            upstream_body=error.upstream_body,
            status_code=error.upstream_status,
            error_type="invalid_request_error",
        )
        self._relay = _is_envelope(error.upstream_body)

    def body(self) -> bytes:
        return self.upstream_body if self._relay else super().body()


def _is_envelope(body: bytes) -> bool:
    try:
        _envelope_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return False
    return True


def _error_message(body: bytes) -> str:
    try:
        message = _envelope_decoder.decode(body).error.message
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return ""
    return (message or "")[:500]
