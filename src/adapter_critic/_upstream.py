"""Upstream calls: the one shared httpx client, bearer tokens read at call time, and the translation of
every httpx outcome into a `Completion` or an `UpstreamError` (SPEC §7).

A `base_url` that is a path (`/v1`) is served in-process by the wrapped ASGI app (middleware, demo).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

import httpx
import msgspec
from starlette.types import ASGIApp

from ._exceptions import (
    ServerError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from ._resolve import StageTarget

logger = logging.getLogger("adapter_critic")

IN_PROCESS_ORIGIN = "http://in-process.adapter-critic"
_MAX_CONNECTIONS = 256


class Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


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

    def values(self) -> list[str]:
        found = (os.environ.get(name, "") for name in self._names)
        # Longest first, so a key that contains another is replaced whole.
        return sorted({value for value in found if value}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for value in self.values():
            text = text.replace(value, "***")
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        for value in self.values():
            data = data.replace(value.encode(), b"***")
        return data


class Upstream:
    """The shared upstream client(s); opened and closed by the app's lifespan.

    One `httpx.AsyncClient` serves every network upstream; a second one, over `httpx.ASGITransport`,
    serves path `base_url`s from `in_process_app`. A client passed in as `client` is used as is and
    never closed here (tests, hosts that manage their own pool).
    """

    def __init__(
        self,
        *,
        timeout: float,
        secrets: Secrets,
        client: httpx.AsyncClient | None = None,
        in_process_app: ASGIApp | None = None,
    ) -> None:
        self._timeout = httpx.Timeout(timeout)
        self.secrets = secrets
        self._given_client = client
        self._in_process_app = in_process_app
        self._client: httpx.AsyncClient | None = None
        self._in_process: httpx.AsyncClient | None = None
        self._opened_lazily = False

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        if self._client is not None:
            return
        self._client = self._given_client or httpx.AsyncClient(
            timeout=self._timeout,
            limits=httpx.Limits(max_connections=_MAX_CONNECTIONS, max_keepalive_connections=_MAX_CONNECTIONS),
            follow_redirects=False,
        )
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
        key = os.environ.get(target.key_env, "") if target.key_env else ""
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    async def complete(self, stage: str, target: StageTarget, body: dict[str, Any]) -> Completion:
        """One non-streaming chat-completions call; raises an `UpstreamError` naming the stage."""
        client = self._client_for(target.base_url)
        url = f"{target.base_url}/chat/completions"
        try:
            response = await client.post(url, content=_encoder.encode(body), headers=self.headers_for(target))
        except httpx.TimeoutException:
            raise UpstreamTimeout(
                f"The {stage} stage's upstream ({target.label}) did not answer within {self._timeout.read} seconds.",
                stage=stage,
            ) from None
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) could not be reached: "
                f"{self.secrets.redact(type(exc).__name__ + ': ' + str(exc))}",
                stage=stage,
            ) from None
        if response.status_code >= 400:
            raise self.status_error(stage, target, response.status_code, response.content, response.headers)
        if response.status_code != 200:
            raise UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) answered HTTP {response.status_code} "
                "instead of a chat completion.",
                stage=stage,
            )
        try:
            completion = _completion_decoder.decode(response.content)
        except msgspec.DecodeError:
            completion = None
        if completion is None or not completion.choices:
            raise UpstreamUnavailable(
                f"The {stage} stage's upstream ({target.label}) did not answer with an OpenAI chat completion.",
                stage=stage,
            )
        return completion

    def status_error(
        self, stage: str, target: StageTarget, status: int, content: bytes, headers: httpx.Headers
    ) -> UpstreamStatusError:
        body = self.secrets.redact_bytes(content)
        detail = _error_message(body)
        said = f": {detail}" if detail else ""
        if status == 429:
            retry_after = headers.get("retry-after")
            return UpstreamStatusError(
                f"The {stage} stage's upstream ({target.label}) is rate limited (HTTP 429){said}",
                stage=stage,
                upstream_status=status,
                upstream_body=body,
                status_code=429,
                error_type="rate_limit_error",
                code="rate_limit_exceeded",
                headers={"retry-after": retry_after} if retry_after else {},
            )
        return UpstreamStatusError(
            f"The {stage} stage's upstream ({target.label}) answered HTTP {status}{said}",
            stage=stage,
            upstream_status=status,
            upstream_body=body,
        )


def relay_first_call_error(error: UpstreamError) -> UpstreamError:
    """A 4xx (not 429) on the first API call is the client's own problem: relay the status and envelope."""
    if not isinstance(error, UpstreamStatusError) or not 400 <= error.upstream_status < 500:
        return error
    if error.upstream_status == 429:
        return error
    relayed = RelayedUpstreamError(error)
    return relayed


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
    except msgspec.DecodeError:
        return False
    return True


def _error_message(body: bytes) -> str:
    try:
        message = _envelope_decoder.decode(body).error.message
    except msgspec.DecodeError:
        return ""
    return (message or "")[:500]
