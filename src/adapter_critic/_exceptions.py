"""Every error the package raises, and how each becomes an OpenAI error envelope (SPEC §7).

AdapterCriticError
├── ConfigError           -- the config file is missing, unreadable or invalid (raised at load/start-up)
└── APIError              -- anything that ends a request with an OpenAI error envelope
    ├── RequestError      -- the client's request is wrong (400/404/413)
    ├── AuthenticationError -- no or a wrong API key where inbound auth is on (401)
    ├── ServerError       -- a bug or an unexpected state (500); the message never reaches the client
    ├── Overloaded        -- too many requests at once, or shutting down (503 with Retry-After)
    └── UpstreamError     -- an upstream stage call failed
        ├── UpstreamStatusError   -- the upstream answered 4xx/5xx
        ├── UpstreamTimeout       -- the upstream did not answer in time (504)
        └── UpstreamUnavailable   -- unreachable, or its answer is not an OpenAI response (502)
"""

from __future__ import annotations

from typing import Any

import msgspec


class AdapterCriticError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(AdapterCriticError):
    """The config is invalid; the message names the file and the key path."""


class APIError(AdapterCriticError):
    """An error that is answered to the client as an OpenAI error envelope."""

    status_code: int = 500
    error_type: str = "server_error"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status_code is not None:
            self.status_code = status_code
        if error_type is not None:
            self.error_type = error_type
        self.param = param
        self.code = code
        self.headers: dict[str, str] = dict(headers or {})

    def envelope(self) -> dict[str, Any]:
        """The OpenAI `{"error": {...}}` body for this error."""
        return error_envelope(self.message, self.error_type, param=self.param, code=self.code)

    def body(self) -> bytes:
        return msgspec.json.encode(self.envelope())


class RequestError(APIError):
    """The client's request is invalid (400 unless said otherwise); `param` names the field."""

    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationError(APIError):
    """Inbound auth is on and the request has no accepted `Authorization: Bearer <key>` (401)."""

    status_code = 401
    error_type = "authentication_error"


class ServerError(APIError):
    """Something unexpected; the client only sees a generic message with the request id."""

    status_code = 500
    error_type = "server_error"


class Overloaded(APIError):
    """No request slot freed up within `queue_timeout_seconds`, or the server is shutting down (503).

    It carries `Retry-After` and no `x-should-retry: false`: nothing ran, so a client retry costs nothing twice."""

    status_code = 503
    error_type = "server_error"


class UpstreamError(APIError):
    """An upstream stage call failed; `stage` names it (api, api_draft, adapter, critic, api_final)."""

    status_code = 502
    error_type = "upstream_error"

    def __init__(self, message: str, *, stage: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.stage = stage
        # The OpenAI SDKs would re-run the whole multi-stage request on a 5xx.
        self.headers.setdefault("x-should-retry", "false")


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an error status; `upstream_status` and `upstream_body` keep what it said."""

    def __init__(self, message: str, *, stage: str, upstream_status: int, upstream_body: bytes, **kwargs: Any) -> None:
        super().__init__(message, stage=stage, **kwargs)
        self.upstream_status = upstream_status
        self.upstream_body = upstream_body
        self.retry_after_seconds: float | None = None  # the upstream's `Retry-After`, when it sent one


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer within the timeout."""

    status_code = 504

    def __init__(self, message: str, *, stage: str, **kwargs: Any) -> None:
        kwargs.setdefault("code", "upstream_timeout")
        super().__init__(message, stage=stage, **kwargs)


class UpstreamUnavailable(UpstreamError):
    """The upstream could not be reached, or its answer was not an OpenAI chat completion."""


def error_envelope(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """Render the OpenAI error envelope."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
