"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Upstream calls: the one shared httpx client, API keys read at call time, and the translation of
every httpx outcome into a `Completion` or an `UpstreamError` (`upstream.failures`; the statuses clients get are
in docs/reference/http.md).

What a stage call looks like on the wire (its path, auth headers, body, and how its answer reads back as
OpenAI) is the target's protocol's (`protocols`, `StageTarget.protocol`); everything else is here.

A `base_url` that is a path (`/v1`) is served in-process by the wrapped ASGI app (middleware, demo).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import httpx
import msgspec
from starlette.types import ASGIApp

from ..config import DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES
from ..core import Completion, StageTarget
from ..errors import ServerError, UpstreamError
from ..protocols import registry as protocols
from ..protocols.base import UpstreamWire
from ..redact import Secrets
from ..timelimit import time_limit
from ..version import USER_AGENT
from .decoding import ACCEPT_ENCODING
from .failures import TRANSPORT_ERRORS, bad_answer, reported_usage, status_error, transport_error
from .inprocess import asgi_stream
from .pinning import pinned_client
from .posting import Opened, posted, read_some
from .sizes import ResponseTooLarge, read_body
from .sse import Piece, iter_batches
from .synthesized import completion_as_chunks
from .transport import AiohttpTransport, network_client

_JSON_CALL = {"content-type": "application/json", "accept": "application/json", "user-agent": USER_AGENT}
logger = logging.getLogger("adapter_critic")

IN_PROCESS_ORIGIN = "http://in-process.adapter-critic"
_MAX_CONNECTIONS = 256

_completion_decoder = msgspec.json.Decoder(Completion)


class Upstream:
    """The shared upstream client(s); opened and closed by the app's lifespan.

    One `httpx.AsyncClient` serves every network upstream (over aiohttp when `httpx-aiohttp` is installed, see
    `upstream.transport`); a second one, over `httpx.ASGITransport`, serves path `base_url`s from `in_process_app`.
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
        wires: Mapping[str, UpstreamWire] | None = None,
        inject: Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout or timeout)
        self._max_connections = max_connections
        self.secrets = secrets
        self._max_response_bytes = max_response_bytes
        self._given_client = client
        self._in_process_app = in_process_app
        self._client: httpx.AsyncClient | None = None
        # The aiohttp transport under the network client this made: its calls go straight through it.
        self._direct: AiohttpTransport | None = None
        self._in_process: httpx.AsyncClient | None = None
        self._pinned: httpx.AsyncClient | None = None
        self._opened_lazily = False
        # Adds the current trace context (`traceparent`) to a call's headers, when tracing is on.
        self.inject = inject
        self._wires = wires

    def wire(self, target: StageTarget) -> UpstreamWire:
        """How a call to `target` is made and read: its protocol's upstream side."""
        if self._wires is None:
            self._wires = protocols.sides().upstream
        try:
            return self._wires[target.protocol]
        except KeyError:  # the config is validated at load; only a hand-made target can name no protocol
            raise ServerError(f"no protocol {target.protocol!r} is registered for {target.label}") from None

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        if self._client is not None:
            return
        limits = httpx.Limits(max_connections=self._max_connections, max_keepalive_connections=self._max_connections)
        if self._given_client is not None:
            self._client = self._given_client
        else:
            client = network_client(timeout=self._timeout, limits=limits)
            self._client, self._direct = client, client.aiohttp_transport
        if self._in_process_app is not None:
            self._in_process = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=self._in_process_app), base_url=IN_PROCESS_ORIGIN
            )

    async def aclose(self) -> None:
        client, in_process, pinned = self._client, self._in_process, self._pinned
        self._client = self._in_process = self._pinned = None
        self._direct = None
        if client is not None and client is not self._given_client:
            await client.aclose()
        for own in (in_process, pinned):
            if own is not None:
                await own.aclose()

    @property
    def is_open(self) -> bool:
        return self._client is not None

    def client_for(self, base_url: str, pinned: tuple[str, ...] = ()) -> httpx.AsyncClient:
        """The client for a call to `base_url`; for a pinned target (`upstream.pinning`) always this server's own
        pinning client, also when a client was given (no other client can be made to connect to given addresses)."""
        if pinned:
            if self._pinned is None:
                limits = httpx.Limits(max_connections=self._max_connections)
                self._pinned = pinned_client(timeout=self._timeout, limits=limits)
            return self._pinned
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
        """The headers of a JSON call to `target`, its key in the headers its protocol sends it in."""
        # gzip or nothing: what `decoding` inflates a bounded piece at a time (in-process: nothing to save).
        encoding = "identity" if target.base_url.startswith("/") else ACCEPT_ENCODING
        headers = {**_JSON_CALL, "accept-encoding": encoding}
        headers.update(self.wire(target).headers(api_key(target)))
        if self.inject is not None:
            self.inject(headers)
        return headers

    async def probe(self, target: StageTarget, seconds: float) -> tuple[int, bytes]:
        """`GET {base_url}/models` with the target's credentials (its URL's key), within `seconds`: the HTTP status,
        and the body of a 2xx answer up to 1 MB (empty otherwise), the models it lists.

        Raises `httpx.HTTPError`, `TimeoutError`, or `ServerError` (no in-process app)."""
        client = self.client_for(target.base_url)
        headers = {**self.headers_for(target), "accept": "application/json"}
        headers.pop("content-type", None)
        with anyio.fail_after(seconds):
            url = f"{target.base_url}{self.wire(target).probe_path}"
            async with client.stream("GET", url, headers=headers, timeout=seconds) as response:
                if not 200 <= response.status_code < 300:
                    return response.status_code, b""
                try:
                    return response.status_code, await read_body(response.headers, response.aiter_bytes(), 1 << 20)
                except ResponseTooLarge:
                    return response.status_code, b""

    def timeout_for(self, target: StageTarget) -> httpx.Timeout:
        """The target's own `timeout_seconds`/`connect_timeout_seconds`, else the server-wide ones."""
        return _timeout(
            target.timeout_seconds or self._timeout.read, target.connect_timeout_seconds or self._timeout.connect
        )

    async def complete(self, stage: str, target: StageTarget, body: dict[str, Any]) -> Completion:
        """One non-streaming chat-completions call; raises an `UpstreamError` naming the stage."""
        client = self.client_for(target.base_url, target.pinned)
        wire = self.wire(target)
        timeout = self.timeout_for(target)
        opened = self._post(client, target, f"{target.base_url}{wire.path}", wire.encode(body, stream=False), timeout)
        try:
            # The time limit also bounds clients that ignore httpx timeouts (a given client, in-process ASGI apps).
            async with time_limit(timeout.read), opened as (status, headers, chunks):
                # Read incrementally and refused past the limit, never buffered without bound.
                content = await read_body(headers, chunks, self._max_response_bytes)
        except TRANSPORT_ERRORS as exc:
            raise self._failed(stage, target, exc, failed="could not be reached") from None
        if status >= 400:
            raise status_error(stage, target, status, content, headers, self.secrets)
        if status != 200:
            raise bad_answer(stage, target, f"answered HTTP {status} instead of a chat completion.")
        translated = wire.completion(content)
        try:
            completion = None if translated is None else _completion_decoder.decode(translated)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
            completion = None
        if translated is None or completion is None or not completion.choices:
            raise bad_answer(stage, target, f"did not answer with {_an_answer(target)}.", reported_usage(translated))
        return completion.with_source(translated)

    @contextlib.asynccontextmanager
    async def stream(
        self, stage: str, target: StageTarget, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[list[bytes] | bytes | Piece]]:
        """A streaming chat-completions call: yields the upstream's SSE `data` payloads up to `[DONE]`, in
        batches (one list per upstream read; from an OpenAI upstream, a read of whole events as it came, bytes, where
        it is one, and an event whose line a read did not end in pieces: `UpstreamWire.whole_reads`).

        The upstream is asked for its usage (`stream_options.include_usage`). An upstream that ignores `stream`
        and answers one JSON `chat.completion` is read as the chunks it would have streamed. Every failure —
        before the first payload or while iterating, which must happen in the block (any transport error raised in
        it is taken for the call's) — is raised as an `UpstreamError` naming the stage, and leaving the block closes
        (or, in-process, cancels) the upstream call.
        """
        wire = self.wire(target)
        content = wire.encode(body, stream=True)
        headers = {**self.headers_for(target), "accept": "text/event-stream"}
        url = f"{target.base_url}{wire.path}"
        client = self.client_for(target.base_url, target.pinned)
        timeout = self.timeout_for(target)
        opened: contextlib.AbstractAsyncContextManager[Opened]
        if client is self._in_process and self._in_process_app is not None:
            opened = asgi_stream(
                self._in_process_app, path=url, headers=headers, body=content, read_timeout=timeout.read or 0
            )
        else:
            opened = self._post(client, target, url, content, timeout, headers)
        try:
            async with opened as (status, response_headers, chunks):
                if status >= 400:
                    raise status_error(stage, target, status, await read_some(chunks), response_headers, self.secrets)
                kind = response_headers.get("content-type", "")
                if status == 200 and kind.startswith("application/json"):
                    translated = wire.completion(await read_body(response_headers, chunks, self._max_response_bytes))
                    yield self._as_stream(stage, target, translated)
                elif not kind.startswith("text/event-stream"):
                    raise bad_answer(
                        stage, target, f"did not answer with an event stream (HTTP {status}, content-type {kind!r})."
                    )
                else:
                    # A failure while the caller iterates is raised in its `async with` block, so it comes back here
                    # and is mapped below: no generator around the reader to pay for at every read.
                    limit = self._max_response_bytes
                    yield (
                        iter_batches(chunks, limit, whole=True)
                        if wire.whole_reads
                        else wire.chunks(iter_batches(chunks, limit))
                    )
        except TRANSPORT_ERRORS as exc:
            raise self._failed(stage, target, exc) from None

    async def _as_stream(self, stage: str, target: StageTarget, content: bytes | None) -> AsyncIterator[list[bytes]]:
        payloads = None if content is None else completion_as_chunks(content)
        if payloads is None:
            raise bad_answer(stage, target, f"did not answer with {_an_answer(target)}.", reported_usage(content))
        yield payloads

    def _post(
        self,
        client: httpx.AsyncClient,
        target: StageTarget,
        url: str,
        content: bytes,
        timeout: httpx.Timeout,
        headers: Mapping[str, str] | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Opened]:
        direct = self._direct if client is self._client else None
        headers = self.headers_for(target) if headers is None else headers
        return posted(
            client, url, headers=headers, content=content, timeouts=timeout, pinned=target.pinned, direct=direct
        )

    def _failed(self, stage: str, target: StageTarget, exc: Exception, failed: str = "failed") -> UpstreamError:
        read_timeout = self.timeout_for(target).read
        return transport_error(stage, target, exc, secrets=self.secrets, read_timeout=read_timeout, failed=failed)


@functools.lru_cache(maxsize=64)
def _timeout(read: float | None, connect: float | None) -> httpx.Timeout:
    """Made once per pair of values: a call's timeouts are a few, and making one costs a little every call."""
    return httpx.Timeout(read, connect=connect)


def api_key(target: StageTarget) -> str | None:
    """The key a call to `target` carries: the caller's own token when it forwards it (never the server's key
    then), else the value of its key env var, read now (keys rotate without a restart)."""
    if target.forward_client_authorization:
        return target.client_token or None
    key = os.environ.get(target.key_env, "").strip() if target.key_env else ""
    return key or None


def _an_answer(target: StageTarget) -> str:
    return (
        "an OpenAI chat completion" if target.protocol == "openai" else f"an answer of the {target.protocol} protocol"
    )
