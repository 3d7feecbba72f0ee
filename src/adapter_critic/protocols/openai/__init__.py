"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The OpenAI chat-completions protocol: the server's own language, on both sides.

Inbound, `POST /chat/completions` decodes the body as is (`request.decode`), answers a `chat.completion`
(`render`) or a `chat.completion.chunk` stream (`chunks`) and errors in the OpenAI envelope
(`errors.render_error`); the caller's key comes as `Authorization: Bearer`. Upstream, a stage call is posted as it
is built to `{base_url}/chat/completions` with `Authorization: Bearer <key>`, and its answer is read as it comes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.types import Scope

from ...core import ChatRequest
from ...errors import APIError, Rendered, render_error
from ...events import RunRecord
from ...request.decode import decode_request
from ..base import Inbound, Protocol, Redact, StreamRenderer, UpstreamWire, bearer_token
from .chunks import ChunkWriter
from .render import completion, new_completion_id

_encoder = msgspec.json.Encoder()


class OpenAIInbound(Inbound):
    path = "/chat/completions"

    def new_id(self) -> str:
        return new_completion_id()

    def decode(self, body: bytes, *, max_messages: int | None) -> ChatRequest:
        return decode_request(body, max_messages=max_messages)

    def response(self, record: RunRecord, *, response_id: str, request: ChatRequest) -> bytes:
        return completion(record, completion_id=response_id)

    def stream(self, request: ChatRequest, *, response_id: str, served_model: str) -> StreamRenderer:
        return ChunkWriter(completion_id=response_id, served_model=served_model, include_usage=request.include_usage)

    def render_error(self, error: APIError, redact: Redact | None = None) -> Rendered:
        return render_error(error, redact)

    def credential(self, scope: Scope) -> bytes | None:
        return bearer_token(scope)


class OpenAIWire(UpstreamWire):
    path = "/chat/completions"
    whole_reads = True

    def headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def encode(self, body: dict[str, Any], *, stream: bool) -> bytes:
        if stream:
            body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        return _encoder.encode(body)

    def completion(self, content: bytes) -> bytes | None:
        return content

    def chunks(self, batches: AsyncIterator[list[bytes]]) -> AsyncIterator[list[bytes]]:
        return batches


class OpenAI(Protocol):
    name = "openai"

    def inbound(self, settings: Any) -> Inbound:
        return INBOUND

    def upstream(self, settings: Any) -> UpstreamWire:
        return WIRE


INBOUND = OpenAIInbound()
WIRE = OpenAIWire()
