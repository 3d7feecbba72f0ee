"""How every way an upstream call can fail becomes one `UpstreamError` with structured fields (SPEC §7).

This is the one place where a dependency's exceptions (httpx's, aiohttp's through the transport, the size
limit's, the event stream reader's) are translated; their own wording is never shown unredacted.
"""

from __future__ import annotations

import httpx

from ..core import StageTarget, Usage
from ..errors import UpstreamError, read_error_body
from ..redact import Secrets
from .limits import ResponseTooLarge
from .retry import parse_retry_after
from .sse import StreamIncomplete

# What the transport, the size limit and the event stream reader raise; each maps to an `UpstreamError`.
TRANSPORT_ERRORS = (httpx.HTTPError, TimeoutError, StreamIncomplete, ResponseTooLarge)


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
    label = target.label
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        detail = f"did not answer within {read_timeout} seconds."
        return UpstreamError(stage=stage, target=label, kind="timeout", detail=detail, usage=usage)
    if isinstance(exc, StreamIncomplete):
        detail = "ended its event stream before `data: [DONE]`."
        return UpstreamError(stage=stage, target=label, kind="unreachable", detail=detail, usage=usage)
    if isinstance(exc, ResponseTooLarge):
        return UpstreamError(stage=stage, target=label, kind="bad_answer", detail=f"answered, but {exc}.", usage=usage)
    said = secrets.redact(f"{type(exc).__name__}: {exc}", target.client_token)
    return UpstreamError(stage=stage, target=label, kind="unreachable", detail=f"{failed}: {said}", usage=usage)


def status_error(
    stage: str, target: StageTarget, status: int, content: bytes, headers: httpx.Headers, secrets: Secrets
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
