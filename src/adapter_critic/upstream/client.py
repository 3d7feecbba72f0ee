"""Upstream calls: the one shared httpx client, API keys read at call time, and the translation of
every httpx outcome into a `Completion` or an `UpstreamError` (SPEC §7).

What a stage call looks like on the wire (its path, auth headers, body, and how its answer reads back as
OpenAI) is the target's protocol's (`protocols`, `StageTarget.protocol`); everything else is here.

A `base_url` that is a path (`/v1`) is served in-process by the wrapped ASGI app (middleware, demo).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
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
from .failures import TRANSPORT_ERRORS, bad_answer, status_error, transport_error
from .inprocess import asgi_stream
from .limits import limit_chunks, post_limited, sent
from .sse import iter_batches
from .synthesized import completion_as_chunks
from .transport import network_client

logger = logging.getLogger("adapter_critic")

IN_PROCESS_ORIGIN = "http://in-process.adapter-critic"
_MAX_CONNECTIONS = 256

_completion_decoder = msgspec.json.Decoder(Completion)


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
        wires: Mapping[str, UpstreamWire] | None = None,
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

    def client_for(self, base_url: str) -> httpx.AsyncClient:
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
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.update(self.wire(target).headers(api_key(target)))
        return headers

    async def probe(self, target: StageTarget, seconds: float) -> int:
        """`GET {base_url}/models` with the target's credentials (§4), within `seconds`; the HTTP status.

        The body is never read. Raises `httpx.HTTPError`, `TimeoutError`, or `ServerError` (no in-process app)."""
        client = self.client_for(target.base_url)
        headers = {**self.headers_for(target), "accept": "application/json"}
        headers.pop("content-type", None)
        with anyio.fail_after(seconds):
            url = f"{target.base_url}{self.wire(target).probe_path}"
            async with client.stream("GET", url, headers=headers, timeout=seconds) as response:
                return response.status_code

    def timeout_for(self, target: StageTarget) -> httpx.Timeout:
        """The target's own `timeout_seconds`/`connect_timeout_seconds`, else the server-wide ones."""
        read = target.timeout_seconds or self._timeout.read
        return httpx.Timeout(read, connect=target.connect_timeout_seconds or self._timeout.connect)

    async def complete(self, stage: str, target: StageTarget, body: dict[str, Any]) -> Completion:
        """One non-streaming chat-completions call; raises an `UpstreamError` naming the stage."""
        client = self.client_for(target.base_url)
        wire = self.wire(target)
        url = f"{target.base_url}{wire.path}"
        timeout = self.timeout_for(target)
        try:
            # `fail_after` also bounds clients that ignore httpx timeouts (a given client, in-process ASGI apps).
            with anyio.fail_after(timeout.read):
                # Read incrementally and refused past the limit, never buffered without bound.
                response, content = await post_limited(
                    client,
                    url,
                    limit=self._max_response_bytes,
                    content=wire.encode(body, stream=False),
                    headers=self.headers_for(target),
                    timeout=timeout,
                )
        except TRANSPORT_ERRORS as exc:
            raise self._failed(stage, target, exc, failed="could not be reached") from None
        if response.status_code >= 400:
            raise status_error(stage, target, response.status_code, content, response.headers, self.secrets)
        if response.status_code != 200:
            raise bad_answer(stage, target, f"answered HTTP {response.status_code} instead of a chat completion.")
        translated = wire.completion(content)
        try:
            completion = None if translated is None else _completion_decoder.decode(translated)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
            completion = None
        if translated is None or completion is None or not completion.choices:
            raise bad_answer(stage, target, f"did not answer with {_an_answer(target)}.")
        return completion.with_source(translated)

    @contextlib.asynccontextmanager
    async def stream(
        self, stage: str, target: StageTarget, body: dict[str, Any]
    ) -> AsyncIterator[AsyncIterator[list[bytes]]]:
        """A streaming chat-completions call: yields the upstream's SSE `data` payloads up to `[DONE]`, in
        batches (one list per upstream read).

        The upstream is asked for its usage (`stream_options.include_usage`). An upstream that ignores `stream`
        and answers one JSON `chat.completion` is read as the chunks it would have streamed. Every failure —
        before the first payload or while iterating — is raised as an `UpstreamError` naming the stage, and
        leaving the block closes (or, in-process, cancels) the upstream call.
        """
        wire = self.wire(target)
        content = wire.encode(body, stream=True)
        headers = {**self.headers_for(target), "accept": "text/event-stream"}
        url = f"{target.base_url}{wire.path}"
        client = self.client_for(target.base_url)
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
                limited = limit_chunks(chunks, self._max_response_bytes)
                if status >= 400:
                    raise status_error(stage, target, status, await _read_some(chunks), response_headers, self.secrets)
                kind = response_headers.get("content-type", "")
                if status == 200 and kind.startswith("application/json"):
                    translated = wire.completion(b"".join([part async for part in limited]))
                    yield self._as_stream(stage, target, translated)
                elif not kind.startswith("text/event-stream"):
                    raise bad_answer(
                        stage, target, f"did not answer with an event stream (HTTP {status}, content-type {kind!r})."
                    )
                else:
                    yield self._payloads(stage, target, wire.chunks(iter_batches(limited)))
        except TRANSPORT_ERRORS as exc:
            raise self._failed(stage, target, exc) from None

    async def _payloads(
        self, stage: str, target: StageTarget, batches: AsyncIterator[list[bytes]]
    ) -> AsyncIterator[list[bytes]]:
        try:
            async for batch in batches:
                yield batch
        except TRANSPORT_ERRORS as exc:
            raise self._failed(stage, target, exc) from None

    async def _as_stream(self, stage: str, target: StageTarget, content: bytes | None) -> AsyncIterator[list[bytes]]:
        payloads = None if content is None else completion_as_chunks(content)
        if payloads is None:
            raise bad_answer(stage, target, f"did not answer with {_an_answer(target)}.")
        yield payloads

    def _failed(self, stage: str, target: StageTarget, exc: Exception, failed: str = "failed") -> UpstreamError:
        read_timeout = self.timeout_for(target).read
        return transport_error(stage, target, exc, secrets=self.secrets, read_timeout=read_timeout, failed=failed)


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
