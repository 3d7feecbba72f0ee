"""What a protocol plug-in is: the `Protocol` base class, and its two optional sides.

The pipeline speaks one language inside: OpenAI chat completions. A request is a `ChatRequest` (OpenAI
messages and options), a stage call sends an OpenAI chat-completions body and reads an OpenAI `chat.completion`
(or its `chat.completion.chunk` stream), and a finished run is a `RunRecord`. A protocol translates at the
edges, so every workflow runs unchanged whatever its client or its upstreams speak:

- `Inbound` — the client side. The path it serves under the mount (`/messages`), how its request body becomes
  a `ChatRequest`, how a finished run becomes its response body, how a streamed run becomes its event stream
  (`StreamRenderer`), its error envelope and status mapping, and which headers carry the caller's API key.
- `UpstreamWire` — the stage-target side, used for targets whose config says `protocol = "<name>"`. The path
  a stage call is posted to (below the target's `base_url`), its auth headers, how the OpenAI body of a stage
  call becomes its request body, and how its answer (plain, streamed, or an error body) reads back as OpenAI.
  Transport, timeouts, size limits, retries and error classification (`upstream.failures`) stay the upstream client's.

A plug-in subclasses `Protocol`, is registered under the entry-point group `adapter_critic.protocols`
(`name = "module:Class"`) and may declare `Settings`, a msgspec Struct read from the config's
`[protocols.<name>]` table (validated at load).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar
from typing import Protocol as TypingProtocol

import msgspec
from starlette.types import Scope

from ..core import Answer, ChatRequest
from ..errors import APIError, Rendered
from ..events import RunRecord

__all__ = ["Inbound", "NoSettings", "Protocol", "Redact", "StreamRenderer", "UpstreamWire"]

# Masks secrets the request itself echoed (model names, URLs) in an error message.
Redact = Callable[[str], str]

_SCHEME = b"bearer "


class NoSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A protocol without settings of its own."""


class StreamRenderer(TypingProtocol):
    """One streamed response's events, in the client's protocol; made per request (it may keep state).

    The stream writer (`http.stream`) calls, in order: `answer` or `relayed` (any number of times), then `tail`
    once; `progress` between them when the client asked for progress; `error_event` instead of `tail` when the
    run fails after the first byte went out. Each returns the bytes to write (whole SSE events, maybe none).

    A renderer whose first event carries usage (Anthropic's `message_start`) may also have `begin(known: Usage)`:
    called once, before the first `relayed` or `answer` (or `tail`), with the usage known by then — the stages
    that finished, and what the final call's upstream reported as it started.
    """

    keepalive: bytes  # written whenever nothing went out for `keepalive_seconds` (an SSE comment, or a ping)

    def relayed(self, payloads: list[bytes]) -> bytes:
        """Upstream `chat.completion.chunk` payloads of the final call (OpenAI, whatever the upstream spoke)."""
        ...

    def answer(self, answer: Answer) -> bytes:
        """An answer known whole (an adapter's, a degraded draft), as the events that stream it."""
        ...

    def tail(self, record: RunRecord, finish: bytes | None) -> bytes:
        """The end of the stream: `finish` is the upstream's finish chunk (None when the answer was known whole);
        the `adapter_critic` extension (`events.extension(record)`) rides on it."""
        ...

    def progress(self, stage: str, ok: bool, elapsed_ms: float) -> bytes:
        """An event saying an earlier stage finished (only for clients that asked: `x_adapter_critic.progress`)."""
        ...

    def error_event(self, rendered: Rendered) -> bytes:
        """The event that ends a stream with an error, once the status line has gone out."""
        ...


class Inbound:
    """The client side of a protocol: one `POST {path}` route under the mount.

    Class attributes:
        path: the route below the mount (`/chat/completions`, `/messages`); the standalone server adds `/v1`.
        key_hint: where the caller's API key goes, as a 401's message says it ("an `x-api-key` header").
    """

    path: ClassVar[str]
    key_hint: ClassVar[str] = "an `Authorization: Bearer <key>` header"  # where a 401 says to send the key

    def new_id(self) -> str:
        """A new response id (also the run's and the log lines' request id)."""
        raise NotImplementedError

    def decode(self, body: bytes, *, max_messages: int | None) -> ChatRequest:
        """The request body as the run's `ChatRequest` (OpenAI messages and options); raises `RequestError`."""
        raise NotImplementedError

    def response(self, record: RunRecord, *, response_id: str, request: ChatRequest) -> bytes:
        """A finished run of `request` as the response body (with the `adapter_critic` extension)."""
        raise NotImplementedError

    def stream(self, request: ChatRequest, *, response_id: str, served_model: str) -> StreamRenderer:
        """The renderer of one streamed response to `request`."""
        raise NotImplementedError

    def render_error(self, error: APIError, redact: Redact | None = None) -> Rendered:
        """Any `APIError` as this protocol's error response: status, headers and envelope."""
        raise NotImplementedError

    def credential(self, scope: Scope) -> bytes | None:
        """The API key the caller presented, in the headers this protocol's clients send it in (inbound auth)."""
        raise NotImplementedError

    def headers(self, response_id: str) -> Mapping[str, str]:
        """Extra headers of every response on this route (e.g. a request-id header the client's SDK reads)."""
        return {}


def bearer_token(scope: Scope) -> bytes | None:
    """The token of the request's first `Authorization: Bearer <token>` header (scheme in any case), if any."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            if value[: len(_SCHEME)].lower() != _SCHEME:
                return None
            return value[len(_SCHEME) :].strip() or None
    return None


class UpstreamWire:
    """How a stage call to a target of this protocol is made and read.

    `complete` and `stream` of the upstream client call, in order: `path` and `headers` for the request,
    `encode` for its body; then `completion` on a 200 JSON answer, or `chunks` on an event stream. Error statuses
    are read by the client itself (any body whose `error.message` is a string is understood; others are shown
    as the status alone).
    """

    path: ClassVar[str] = "/chat/completions"  # where a stage call is posted, below the target's `base_url`
    # Its event stream is OpenAI's own chunks (`chunks` passes them on as they are): the client may then hand the
    # relay a read of whole events undecoded (`upstream.sse.iter_batches(whole=True)`) instead of its payloads.
    whole_reads: ClassVar[bool] = False
    probe_path: ClassVar[str] = "/models"  # what deep health `GET`s, with `headers`

    def headers(self, api_key: str | None) -> dict[str, str]:
        """The auth (and version) headers of a call carrying `api_key` (None: the target has no key)."""
        raise NotImplementedError

    def encode(self, body: dict[str, Any], *, stream: bool) -> bytes:
        """The request body for an OpenAI chat-completions body (`model`, `messages`, options); `stream` asks for
        an event stream, with usage."""
        raise NotImplementedError

    def completion(self, content: bytes) -> bytes | None:
        """A 200 JSON answer as an OpenAI `chat.completion` body; None when it is not this protocol's answer."""
        raise NotImplementedError

    def chunks(self, batches: AsyncIterator[list[bytes]]) -> AsyncIterator[list[bytes]]:
        """The SSE `data` payloads of an event stream (per upstream read, as `upstream.sse.iter_batches` reads
        them, which raises `StreamIncomplete` at an end without `[DONE]`) as OpenAI `chat.completion.chunk`
        payloads, up to the end of the answer. An error event becomes a payload `{"error": {"message": ...}}`."""
        raise NotImplementedError


class Protocol:
    """Base class of a protocol plug-in, registered under the entry-point group `adapter_critic.protocols`.

    Class attributes:
        name: the protocol's name, as `protocol = "…"` on a stage target and in the config's `[protocols.<name>]`.
        Settings: a msgspec Struct of its settings (`[protocols.<name>]`), its defaults used where absent.

    `inbound` and `upstream` return its sides for the given settings, or None where it has no such side (a
    protocol only clients speak, or only upstreams).
    """

    name: ClassVar[str]
    Settings: ClassVar[type[msgspec.Struct]] = NoSettings

    def inbound(self, settings: Any) -> Inbound | None:
        return None

    def upstream(self, settings: Any) -> UpstreamWire | None:
        return None
