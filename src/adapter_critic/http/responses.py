"""The OpenAI-shaped answers of the HTTP layer: a `chat.completion` with its `adapter_critic` extension
(SPEC §6), and the one error response every part of the server answers with (§7).

Invariant: top-level `usage` is the per-field sum of every stage's usage (`adapter_critic.tokens.total`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from starlette.responses import Response

from ..core import Usage
from ..errors import APIError, render_error
from ..events import Extension, RunRecord, extension

JSON = "application/json"


class ResponseMessage(msgspec.Struct, omit_defaults=True):
    role: str
    content: str | None
    tool_calls: list[Any] | None = None


class Choice(msgspec.Struct):
    index: int
    message: ResponseMessage
    finish_reason: str | None


class ChatCompletion(msgspec.Struct):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    adapter_critic: Extension


_encoder = msgspec.json.Encoder()


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def completion(record: RunRecord, *, completion_id: str) -> ChatCompletion:
    """A finished run as the client's `chat.completion`."""
    ext = extension(record)
    answer = record.answer
    message = ResponseMessage(role="assistant", content=answer.content, tool_calls=answer.tool_calls)
    return ChatCompletion(
        id=completion_id,
        object="chat.completion",
        created=int(time.time()),
        model=record.served_model,
        choices=[Choice(index=0, message=message, finish_reason=answer.finish_reason)],
        usage=ext.tokens.total,
        adapter_critic=ext,
    )


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def error_response(
    error: APIError, headers: Mapping[str, str] | None = None, redact: Callable[[str], str] | None = None
) -> Response:
    """Any error as its §7 response (`render_error`), with `headers` added."""
    rendered = render_error(error, redact)
    return Response(
        rendered.body, status_code=rendered.status, headers={**rendered.headers, **(headers or {})}, media_type=JSON
    )
