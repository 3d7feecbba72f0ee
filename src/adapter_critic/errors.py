"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Every exception this package raises on purpose derives from `AdapterCriticError`, and this is the tree of them
(the classes outside this module are defined where they are raised, named here with their module):

AdapterCriticError
├── ConfigError                -- the config file is missing, unreadable or invalid (load / start-up)
├── APIError                   -- ends a request with an error envelope in the client's protocol
│   ├── RequestError           -- the client's request is wrong (400/404/413)
│   ├── AuthenticationError    -- no or a wrong API key where inbound auth is on (401)
│   ├── ServerError            -- a bug or an unexpected state (500); internals never reach the client
│   ├── Overloaded             -- too many requests at once, or shutting down (503 with Retry-After)
│   ├── RateLimited            -- a key's or a served model's limit is reached (429 with Retry-After)
│   └── UpstreamError          -- an upstream stage call failed; `kind` says how
├── ResponseTooLarge           -- upstream.sizes: an answer passed max_upstream_response_bytes
├── StreamIncomplete           -- an upstream's event stream ended without `data: [DONE]`
├── UndecodableAnswer          -- upstream.decoding: an answer in a content coding not asked for, or corrupt
├── ClientGone                 -- http.disconnect: the client's connection closed before the answer was sent
├── EditError                  -- workflows.edits (also a ValueError): the adapter's reply is no valid review
├── ExtractError               -- workflows.voting (also a ValueError): an `extract` setting that reads nothing
├── _Stopped                   -- workflows.best_of_n, internal: a judge call failed, the judging ends there
├── StoreError                 -- the run store cannot be used as asked
│   ├── StoreURLError          -- store.database (also a ValueError): a store.url it cannot open
│   ├── SchemaTooNew           -- store.schema (also a RuntimeError): written by a newer adapter_critic
│   ├── BadCursor              -- store.records (also a ValueError): a cursor this store did not hand out
│   ├── FeedbackInvalid        -- store.feedback (also a ValueError): feedback that cannot be kept as given
│   ├── FeedbackNotKept        -- store.feedback (also a RuntimeError): feedback the store could not write
│   ├── WriterDied             -- store.writerprocess, internal: the writer process died with a batch
│   └── WriterUnavailable      -- store.writerprocess, internal: no writer process starts; the store writes itself
├── EvalError                  -- an evaluation cannot go on as asked
│   ├── DatasetError           -- evals.dataset: a dataset that cannot be used (names the file and line)
│   ├── EndpointError          -- evals.endpoint: the endpoint cannot be used at all
│   ├── ScorerError            -- evals.scorers: a scorer that cannot be used
│   └── ScoreError             -- evals.scorers: one answer could not be graded
├── CliError                   -- cli.errors (also a click.ClickException): a failure the user can fix, exit 1
└── Interrupted                -- cli.errors (also a click.ClickException): Ctrl-C, exit 130

The three upstream reading errors never leave the upstream client: `upstream.failures` turns each (and every
httpx or aiohttp error) into an `UpstreamError`. Where an error is also a builtin error, callers that caught the
builtin one still do. Python's own exceptions are raised for misuse of the Python API (a `RuntimeError`, as httpx
does), by config validators (a `ValueError`, which loading the config reports as a `ConfigError`), and inside a
module whose caller catches them at once (a resolver's `OSError`, a time that does not parse).

An `APIError` carries what its raiser knows; how it is answered — HTTP status, envelope `type` and `code`, headers
— is decided in one place, `presentation`, next to `render_error`. Errors are never changed once raised: a layer
that knows more (the first API call relays a 4xx, the retry layer knows when to come back) raises a copy made with
`UpstreamError.evolve`. The statuses and envelopes clients get are listed in docs/reference/http.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from .core import Usage
from .errorwire import error_envelope, read_error_body


class AdapterCriticError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(AdapterCriticError):
    """The config is invalid; the message names the file and the key path."""


class StoreError(AdapterCriticError):
    """The run store cannot be used as asked (a URL it cannot open, a schema too new, a cursor it did not give)."""


class EvalError(AdapterCriticError):
    """An evaluation cannot go on as asked (its dataset, endpoint or scorer), or one answer cannot be graded."""


class APIError(AdapterCriticError):
    """An error answered to the client in its protocol's error envelope.

    It carries what its raiser knows: the message and, where the raiser decides them, the HTTP status (404 for a
    thing that is not there, 413 for a body too large), the parameter at fault, a machine-readable code and extra
    headers. `status_code`, `error_type`, `code` and `headers` are how it is answered (`presentation`).
    """

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
        self.param = param
        self._status, self._code = status_code, code
        self._headers: dict[str, str] = dict(headers or {})

    @property
    def status_code(self) -> int:
        return presentation(self).status

    @property
    def error_type(self) -> str:
        """The OpenAI envelope's `type`."""
        return presentation(self).type

    @property
    def code(self) -> str | None:
        return presentation(self).code

    @property
    def headers(self) -> dict[str, str]:
        return presentation(self).headers


class RequestError(APIError):
    """The client's request is invalid (400 unless said otherwise); `param` names the field."""


class AuthenticationError(APIError):
    """Inbound auth is on and the request has no accepted API key (401)."""


class ServerError(APIError):
    """Something unexpected; the client sees `internal_error`'s wording with the request id, never internals."""


class Overloaded(APIError):
    """No request slot freed up in time, or the server is shutting down (503 with `Retry-After`, no
    `x-should-retry: false`: nothing ran, so a client retry costs nothing twice)."""


class RateLimited(APIError):
    """A caller's or a served model's limit is reached (docs/guides/limits.md): 429 with `Retry-After`."""


class StreamIncomplete(AdapterCriticError):
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
        super().__init__(f"The {stage} stage's upstream ({target}) {detail}")

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
class Presentation:
    """How an error is answered in any protocol: the HTTP status and headers, and the OpenAI envelope's `type`
    and `code` (the other protocols' envelopes are made from these)."""

    status: int
    type: str
    code: str | None
    headers: dict[str, str]


# Each kind of error's HTTP status and envelope `type`, unless its raiser gave a status (404, 413...).
_ANSWERED_AS: dict[type[APIError], tuple[int, str]] = {
    RequestError: (400, "invalid_request_error"),
    AuthenticationError: (401, "authentication_error"),
    ServerError: (500, "server_error"),
    Overloaded: (503, "server_error"),
    RateLimited: (429, "rate_limit_error"),
    APIError: (500, "server_error"),
}


def presentation(error: APIError) -> Presentation:
    """How `error` is answered: the one place that decides statuses, envelope types, codes and headers."""
    if isinstance(error, UpstreamError):
        return _upstream_presentation(error)
    status, error_type = next(_ANSWERED_AS[kind] for kind in type(error).__mro__ if kind in _ANSWERED_AS)
    given = error._status
    return Presentation(status if given is None else given, error_type, error._code, dict(error._headers))


def _upstream_presentation(error: UpstreamError) -> Presentation:
    """A timeout is a 504 and a 429 stays a 429 (with its `Retry-After`); the first API call's own 4xx is relayed
    with its status; anything else is a 502. Only a 429 lets the SDKs retry: they would re-run the whole run."""
    upstream_status = error.upstream_status
    rate_limited = upstream_status == 429
    if error.kind == "timeout":
        status, code = 504, "upstream_timeout"
    elif rate_limited:
        status, code = 429, "rate_limit_exceeded"
    elif upstream_status is not None and error.relays_body:
        status, code = upstream_status, None
    else:
        status, code = 502, None
    headers = {} if rate_limited else {"x-should-retry": "false"}
    if rate_limited and error.retry_after is not None:
        headers["retry-after"] = str(max(1, math.ceil(error.retry_after)))
    if rate_limited:
        error_type = "rate_limit_error"
    elif error.relays_body:
        error_type = "invalid_request_error"
    else:
        error_type = "upstream_error"
    return Presentation(status, error_type, code, headers)


_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Rendered:
    """An error as the client gets it: status, headers and the envelope body."""

    status: int
    headers: dict[str, str]
    body: bytes


def render_error(error: APIError, redact: Any = None) -> Rendered:
    """Any `APIError` as its OpenAI-envelope response; `redact` (a `str -> str`) masks secrets the request itself
    echoed."""
    shown = presentation(error)
    if isinstance(error, UpstreamError) and error.relays_body:
        relayed = _relayed_envelope(error.body)
        if relayed is not None:
            return Rendered(shown.status, shown.headers, relayed)
    message = error.message if redact is None else redact(error.message)
    body = _ENCODER.encode(error_envelope(message, shown.type, param=error.param, code=shown.code))
    return Rendered(shown.status, shown.headers, body)


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
    return _ENCODER.encode(envelope)


def _error_keys(body: bytes) -> set[str]:
    """The keys of an error body's `error` object."""
    try:
        inner = msgspec.json.decode(body, type=dict[str, dict[str, msgspec.Raw]])["error"]
    except (msgspec.DecodeError, KeyError):
        return set()
    return set(inner)
