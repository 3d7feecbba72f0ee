"""Every error the package raises on purpose, as data, and the one function that renders any of them as the
OpenAI error envelope (SPEC §7).

AdapterCriticError
├── ConfigError             -- the config file is missing, unreadable or invalid (load / start-up)
└── APIError                -- ends a request with an error envelope
    ├── RequestError        -- the client's request is wrong (400/404/413)
    ├── AuthenticationError -- no or a wrong API key where inbound auth is on (401)
    ├── ServerError         -- a bug or an unexpected state (500); internals never reach the client
    ├── Overloaded          -- too many requests at once, or shutting down (503 with Retry-After)
    └── UpstreamError       -- an upstream stage call failed; `kind` says how

Errors are never changed once raised: a layer that knows more (the first API call relays a 4xx, the retry
layer knows when to come back) raises a copy made with `UpstreamError.evolve`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .core import Usage


class AdapterCriticError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(AdapterCriticError):
    """The config is invalid; the message names the file and the key path."""


class APIError(AdapterCriticError):
    """An error answered to the client as an OpenAI error envelope."""

    status_code: int = 500
    error_type: str = "server_error"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        self.param = param
        self.code = code
        self.headers: dict[str, str] = dict(headers or {})


class RequestError(APIError):
    """The client's request is invalid (400 unless said otherwise); `param` names the field."""

    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationError(APIError):
    """Inbound auth is on and the request has no accepted API key (401)."""

    status_code = 401
    error_type = "authentication_error"


class ServerError(APIError):
    """Something unexpected; the client sees `internal_error`'s wording with the request id, never internals."""

    status_code = 500
    error_type = "server_error"


class Overloaded(APIError):
    """No request slot freed up in time, or the server is shutting down (503 with `Retry-After`, no
    `x-should-retry: false`: nothing ran, so a client retry costs nothing twice)."""

    status_code = 503
    error_type = "server_error"


class StreamIncomplete(Exception):
    """The upstream's event stream ended without `data: [DONE]` (`upstream.sse.iter_batches` raises it; a protocol
    whose streams have no `[DONE]` reads it as the end, `protocols.base.UpstreamWire.chunks`)."""


UpstreamKind = Literal["status", "timeout", "unreachable", "bad_answer"]


class UpstreamError(APIError):
    """An upstream stage call failed.

    Fields: `stage`; `target` (its `model@base_url` label); `kind` — `status` (it answered an error status,
    `upstream_status`), `timeout`, `unreachable` (no connection, or the connection broke) or `bad_answer` (it
    answered, but not with a chat completion or an event stream); `detail`, what happened in a few words with
    secrets already masked; `body`, the upstream's error body (redacted); `retry_after`, seconds the upstream
    (or, for a final 429, this server) says to wait; `usage`, what the upstream reported before failing;
    `relay`, True when the client gets the upstream's own 4xx status and envelope (the first API call).
    """

    error_type = "upstream_error"

    def __init__(
        self,
        *,
        stage: str,
        target: str,
        kind: UpstreamKind,
        detail: str,
        upstream_status: int | None = None,
        body: bytes = b"",
        retry_after: float | None = None,
        usage: Usage | None = None,
        relay: bool = False,
    ) -> None:
        self.stage, self.target, self.kind, self.detail = stage, target, kind, detail
        self.upstream_status, self.body, self.retry_after = upstream_status, body, retry_after
        self.usage, self.relay = usage, relay
        rate_limited = upstream_status == 429
        if kind == "timeout":
            status, code = 504, "upstream_timeout"
        elif rate_limited:
            status, code = 429, "rate_limit_exceeded"
        elif upstream_status is not None and self.relays_body:
            status, code = upstream_status, None
        else:
            status, code = 502, None
        headers = {} if rate_limited else {"x-should-retry": "false"}  # the SDKs would re-run the whole run
        if rate_limited and retry_after is not None:
            headers["retry-after"] = str(max(1, math.ceil(retry_after)))
        super().__init__(
            f"The {stage} stage's upstream ({target}) {detail}", status_code=status, code=code, headers=headers
        )
        if rate_limited:
            self.error_type = "rate_limit_error"
        elif self.relays_body:
            self.error_type = "invalid_request_error"

    @property
    def retryable(self) -> bool:
        """Worth another attempt: no answer, a broken answer, or a status that says "try again"."""
        return self.kind != "status" or self.upstream_status in RETRYABLE_STATUSES

    @property
    def relays_body(self) -> bool:
        """The client gets the upstream's own status and (redacted) error envelope: a 4xx other than 429 on the
        first API call. Decided by the upstream's status alone — an upstream 502 is this server's 502 too, but its
        body is the upstream's trouble, not the client's, and gets this server's own envelope like any 5xx."""
        status = self.upstream_status
        return self.relay and self.kind == "status" and status is not None and 400 <= status < 500 and status != 429

    def evolve(self, **changes: Any) -> UpstreamError:
        """A copy with `changes` (the error itself is never changed)."""
        fields = {name: getattr(self, name) for name in _UPSTREAM_FIELDS}
        return UpstreamError(**{**fields, **changes})


# 529: Anthropic's "overloaded" (like a 503).
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
_UPSTREAM_FIELDS = ("stage", "target", "kind", "detail", "upstream_status", "body", "retry_after", "usage", "relay")


def internal_error(request_id: str) -> ServerError:
    """The one wording of an unexpected failure: the details are in the server log under the request id."""
    return ServerError(f"Internal server error (request id {request_id}); see the server log.")


@dataclass(frozen=True, slots=True)
class Rendered:
    """An error as the client gets it: status, headers and the envelope body."""

    status: int
    headers: dict[str, str]
    body: bytes


def render_error(error: APIError, redact: Any = None) -> Rendered:
    """Any `APIError` as its §7 response; `redact` (a `str -> str`) masks secrets the request itself echoed."""
    if isinstance(error, UpstreamError) and error.relays_body:
        relayed = _relayed_envelope(error.body)
        if relayed is not None:
            return Rendered(error.status_code, error.headers, relayed)
    message = error.message if redact is None else redact(error.message)
    body = _encoder.encode(error_envelope(message, error.error_type, param=error.param, code=error.code))
    return Rendered(error.status_code, error.headers, body)


def _relayed_envelope(body: bytes) -> bytes | None:
    """An upstream's error body as the client gets it: the body itself when it is a whole OpenAI envelope, the
    same error with its missing fields filled in when it has at least a message, None when it is no envelope."""
    parsed = read_error_body(body)
    error = parsed.error if parsed is not None else None
    if error is None or error.message is None:
        return None
    if error.type is not None and _error_keys(body) >= {"message", "type", "param", "code"}:
        return body
    envelope = error_envelope(error.message, error.type or "invalid_request_error", param=error.param, code=None)
    envelope["error"]["code"] = error.code
    return _encoder.encode(envelope)


def _error_keys(body: bytes) -> set[str]:
    """The keys of an error body's `error` object."""
    try:
        inner = msgspec.json.decode(body, type=dict[str, dict[str, msgspec.Raw]])["error"]
    except (msgspec.DecodeError, KeyError):
        return set()
    return set(inner)


def error_envelope(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error envelope."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class ErrorObject(msgspec.Struct):
    """An OpenAI error object as read back: an upstream's (in its error body, or a stream's error event) or one
    `render_error` made. Any field may be missing; a field of another JSON type makes the body no envelope."""

    message: str | None = None
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class ErrorBody(msgspec.Struct):
    """An OpenAI error envelope as read back, with the usage an upstream reports beside it when it counted any."""

    error: ErrorObject
    usage: Usage | None = None


_envelope_decoder = msgspec.json.Decoder(ErrorBody)
_encoder = msgspec.json.Encoder()


def read_error_body(body: bytes) -> ErrorBody | None:
    """An error body (an upstream's, or one `render_error` made) as an OpenAI envelope, or None when it is not one."""
    try:
        return _envelope_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
        return None
