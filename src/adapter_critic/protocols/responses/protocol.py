"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The Responses protocol plug-in: `POST /responses` (`/v1/responses` standalone) for clients of OpenAI's
Responses API, registered under `adapter_critic.protocols` as `responses`. Inbound only: stage targets keep
speaking chat completions (or another protocol with an upstream side).

A request is mapped (`inbound`) onto a chat-completions body and decoded as any chat request is, so overrides,
limits and the order of checks are the chat endpoint's; the answer is the `response` object
(`outbound`) or its event stream (`stream`); errors are the OpenAI envelope, the key an
`Authorization: Bearer` header — what the `openai` SDKs send and read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Scope

from ...core import ChatRequest
from ...errors import APIError, Rendered, render_error
from ...events import RunRecord
from ...request.decode import decode_request
from ..base import Inbound, Protocol, Redact, StreamRenderer, bearer_token
from . import outbound
from .inbound import Echo, map_request
from .stream import ResponsesEvents


@dataclass(slots=True)
class ResponsesRequest(ChatRequest):
    """A Responses request as the run takes it, with what its response echoes."""

    echo: Echo = field(default_factory=Echo)


def _echo(request: ChatRequest) -> Echo:
    return request.echo if isinstance(request, ResponsesRequest) else Echo()


class ResponsesInbound(Inbound):
    path = "/responses"

    def new_id(self) -> str:
        return outbound.new_id("resp")

    def decode(self, body: bytes, *, max_messages: int | None) -> ChatRequest:
        mapped = map_request(body, max_items=max_messages)
        chat = decode_request(mapped.chat_body)  # `input` was counted against max_messages already
        # Every field of the chat request as decoded (a field added to `ChatRequest` is carried too), and the echo.
        fields = {f.name: getattr(chat, f.name) for f in dataclasses.fields(chat)}
        return ResponsesRequest(**fields, echo=mapped.echo)

    def response(self, record: RunRecord, *, response_id: str, request: ChatRequest) -> bytes:
        return outbound.body(record, _echo(request), response_id=response_id)

    def stream(self, request: ChatRequest, *, response_id: str, served_model: str) -> StreamRenderer:
        return ResponsesEvents(response_id=response_id, served_model=served_model, echo=_echo(request))

    def render_error(self, error: APIError, redact: Redact | None = None) -> Rendered:
        return render_error(error, redact)

    def credential(self, scope: Scope) -> bytes | None:
        return bearer_token(scope)


class Responses(Protocol):
    name = "responses"

    def inbound(self, settings: Any) -> Inbound:
        return INBOUND


INBOUND = ResponsesInbound()
