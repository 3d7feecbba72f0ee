"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The Anthropic Messages protocol, on both sides, written by hand over msgspec Structs (`wire`).

Inbound, `POST /messages` takes a Messages request for any served model (`inbound`), runs it through the served
model's workflow like any other, and answers a `message` or Anthropic's event stream (`render`), errors in
Anthropic's envelope with the statuses of docs/reference/http.md; the caller's key comes as `x-api-key` (or
`Authorization: Bearer`).

Upstream, a target with `protocol = "anthropic"` is called at `{base_url}/messages` with `x-api-key` and
`anthropic-version` (`outbound`), and its answers read back as OpenAI (`answers`). Its error envelope already
reads as the upstream client expects (`error.message`); a 529 (overloaded) is retried like a 503.

Settings (`[protocols.anthropic]`): `max_tokens`, sent when neither the request nor the target's `options` say
(the Messages API requires it), and `version`, the `anthropic-version` header.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Annotated, Any

import msgspec
from starlette.types import Scope

from ...core import ChatRequest
from ...errors import APIError, Rendered
from ...events import RunRecord
from ..base import Inbound, Protocol, Redact, StreamRenderer, UpstreamWire, bearer_token
from . import answers
from .inbound import decode_messages
from .outbound import messages_request
from .render import MessagesStream, message, new_message_id, render_messages_error

DEFAULT_VERSION = "2023-06-01"


class AnthropicSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """What calls to targets with `protocol = "anthropic"` send when the request does not say."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 4096
    """Sent when neither the request nor the target's `options` give `max_tokens` (the Messages API requires it)."""
    version: Annotated[str, msgspec.Meta(min_length=1)] = DEFAULT_VERSION
    """The `anthropic-version` header."""


class MessagesInbound(Inbound):
    path = "/messages"
    key_hint = "an `x-api-key` header (or `Authorization: Bearer <key>`)"

    def new_id(self) -> str:
        return new_message_id()

    def decode(self, body: bytes, *, max_messages: int | None) -> ChatRequest:
        return decode_messages(body, max_messages=max_messages)

    def response(self, record: RunRecord, *, response_id: str, request: ChatRequest) -> bytes:
        return message(record, response_id=response_id)

    def stream(self, request: ChatRequest, *, response_id: str, served_model: str) -> StreamRenderer:
        return MessagesStream(response_id=response_id, served_model=served_model)

    def render_error(self, error: APIError, redact: Redact | None = None) -> Rendered:
        return render_messages_error(error, redact)

    def credential(self, scope: Scope) -> bytes | None:
        for name, value in scope.get("headers", ()):
            if name == b"x-api-key":
                return value.strip() or None
        return bearer_token(scope)

    def headers(self, response_id: str) -> Mapping[str, str]:
        return {"request-id": response_id}


class MessagesWire(UpstreamWire):
    path = "/messages"

    def __init__(self, settings: AnthropicSettings) -> None:
        self.settings = settings

    def headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.settings.version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def encode(self, body: dict[str, Any], *, stream: bool) -> bytes:
        return messages_request(body, stream=stream, default_max_tokens=self.settings.max_tokens)

    def completion(self, content: bytes) -> bytes | None:
        return answers.completion(content)

    def chunks(self, batches: AsyncIterator[list[bytes]]) -> AsyncIterator[list[bytes]]:
        return answers.chunks(batches)


class Anthropic(Protocol):
    name = "anthropic"
    Settings = AnthropicSettings

    def inbound(self, settings: Any) -> Inbound:
        return INBOUND

    def upstream(self, settings: Any) -> UpstreamWire:
        return MessagesWire(settings)


INBOUND = MessagesInbound()
