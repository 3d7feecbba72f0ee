"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

How every way an upstream call can fail becomes one `UpstreamError` with structured fields
(the statuses clients get for each are in docs/reference/http.md).

This is the one place where a dependency's exceptions (httpx's, aiohttp's through the transport, the size
limit's, the event stream reader's) are translated; their own wording is never shown unredacted.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import httpx
import msgspec

from ..core import StageTarget, Usage
from ..errors import StreamIncomplete, UpstreamError
from ..errorwire import read_error_body
from ..redact import Secrets
from .decoding import UndecodableAnswer
from .retry import parse_retry_after
from .sizes import ResponseTooLarge
from .transport import AIOHTTP_ERRORS, as_httpx_error

# What the transport, the size limit and the event stream reader raise; each maps to an `UpstreamError`.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    httpx.HTTPError,
    TimeoutError,
    StreamIncomplete,
    ResponseTooLarge,
    UndecodableAnswer,
    *AIOHTTP_ERRORS,
)


def transport_error(
    stage: str,
    target: StageTarget,
    exc: Exception,
    *,
    secrets: Secrets,
    read_timeout: float | None,
    usage: Usage | None = None,
    failed: str = "failed",
) -> UpstreamError:
    """The `UpstreamError` for an exception of the transport, the size limit or the event stream reader."""
    exc = as_httpx_error(exc)
    label = target.label
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        detail = f"did not answer within {read_timeout} seconds."
        return UpstreamError(stage=stage, target=label, kind="timeout", detail=detail, usage=usage)
    if isinstance(exc, StreamIncomplete):
        detail = "ended its event stream before `data: [DONE]`."
        return UpstreamError(stage=stage, target=label, kind="unreachable", detail=detail, usage=usage)
    if isinstance(exc, ResponseTooLarge | UndecodableAnswer):
        return UpstreamError(stage=stage, target=label, kind="bad_answer", detail=f"answered, but {exc}.", usage=usage)
    said = describe_transport_error(exc, target) or secrets.redact(f"{type(exc).__name__}: {exc}", target.client_token)
    return UpstreamError(stage=stage, target=label, kind="unreachable", detail=f"{failed}: {said}.", usage=usage)


def describe_transport_error(exc: Exception, target: StageTarget) -> str | None:
    """What went wrong on the connection, in this project's words (never a transport library's own wording,
    which can name internals such as `ssl:default`); None for an error without a wording of ours."""
    where = _host_port(target.base_url)
    reason = _os_reason(exc)
    if isinstance(exc, httpx.ConnectError):
        return f"could not connect to {where} ({reason or 'the connection failed'})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{where} closed the connection or answered with malformed HTTP"
    if isinstance(exc, httpx.ReadError | httpx.WriteError):
        return f"the connection to {where} broke ({reason or 'connection reset'})"
    if isinstance(exc, httpx.UnsupportedProtocol):
        return f"{where} cannot be called: only http and https URLs are supported"
    return None


def _host_port(base_url: str) -> str:
    if base_url.startswith("/"):
        return f"the in-process app at {base_url}"
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, ValueError):
        return "the upstream"
    port = url.port or (443 if url.scheme == "https" else 80)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{port}"


def _os_reason(exc: BaseException) -> str | None:
    """The operating system's reason behind a transport error (refused, unreachable, unresolvable), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        inner = getattr(current, "os_error", None)  # aiohttp keeps it there
        if isinstance(inner, OSError):
            current = inner
        if isinstance(current, socket.gaierror):
            return "the host name could not be resolved"
        if isinstance(current, OSError) and current.errno:
            return os.strerror(current.errno).lower()
        current = current.__cause__ or current.__context__
    return None


def status_error(
    stage: str, target: StageTarget, status: int, content: bytes, headers: Mapping[str, str], secrets: Secrets
) -> UpstreamError:
    """The upstream answered an error status: keep what it said (redacted), its usage and its `Retry-After`."""
    body = secrets.redact_bytes(content, target.client_token)
    parsed = read_error_body(body)
    message = (parsed.error.message or "")[:500] if parsed is not None else ""
    said = f": {message}" if message else ""
    detail = f"is rate limited (HTTP 429){said}" if status == 429 else f"answered HTTP {status}{said}"
    return UpstreamError(
        stage=stage,
        target=target.label,
        kind="status",
        detail=detail,
        upstream_status=status,
        body=body,
        retry_after=parse_retry_after(headers),
        usage=parsed.usage if parsed is not None else None,
    )


def bad_answer(stage: str, target: StageTarget, what: str, usage: Usage | None = None) -> UpstreamError:
    """The upstream answered, but not with what was asked for; `what` says what it sent."""
    return UpstreamError(stage=stage, target=target.label, kind="bad_answer", detail=what, usage=usage)


class _Reported(msgspec.Struct):
    usage: Usage | None = None


_reported_decoder = msgspec.json.Decoder(_Reported)


def reported_usage(body: bytes | None) -> Usage | None:
    """The usage an answer that is no usable chat completion still reported (`choices: []`, a message of another
    shape…): the upstream spent those tokens, and a failed attempt counts what its upstream reported."""
    if body is None:
        return None
    try:
        return _reported_decoder.decode(body).usage
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, no usable `usage` object
        return None
