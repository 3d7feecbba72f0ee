"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The OpenAI protocol's answers: a `chat.completion` with its `adapter_critic` extension (docs/reference/http.md),
and the one error response every part of the server answers with (`errors.render_error`) — OpenAI's envelope,
the server's own language.

Invariant: top-level `usage` is the per-field sum of every stage's usage (`adapter_critic.tokens.total`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from starlette.responses import Response

from ...core import Answer, Usage
from ...errors import APIError, render_error
from ...events import Extension, RunRecord, extension
from ...ids import new_id

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
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_list_decoder = msgspec.json.Decoder(list[dict[str, msgspec.Raw]])
_OBJECT = msgspec.Raw(b'"chat.completion"')


def new_completion_id() -> str:
    return new_id("chatcmpl-")


def completion(record: RunRecord, *, completion_id: str) -> bytes:
    """A finished run as the client's `chat.completion`: the upstream's own answer (every top-level, choice and
    message field as it sent them) with the run's `id`, `created` and served `model`, the total `usage` and the
    extension — or, for an answer no upstream gave whole, one built from the answer."""
    ext = extension(record)
    answer = record.answer
    if answer.source is not None:
        relayed = _relayed(answer, answer.source, record.served_model, ext, completion_id)
        if relayed is not None:
            return relayed
    return _encoder.encode(_built(record, ext, completion_id))


def _relayed(answer: Answer, source: bytes, served_model: str, ext: Extension, completion_id: str) -> bytes | None:
    try:
        fields: dict[str, Any] = _fields_decoder.decode(source)
        if answer.edited:  # only then is a choice decoded (the rest stays raw JSON, as the upstream sent it)
            choices: list[dict[str, Any]] = _list_decoder.decode(fields["choices"])
            message: dict[str, Any] = _fields_decoder.decode(choices[0]["message"])
            message["content"] = answer.content
            choices[0]["message"] = message
            fields["choices"] = choices
    except (msgspec.DecodeError, KeyError, IndexError):  # the source was read as a completion: cannot happen
        return None
    fields["id"] = completion_id
    fields["object"] = _OBJECT
    fields["created"] = int(time.time())
    fields["model"] = served_model
    fields["usage"] = ext.tokens.total
    fields["adapter_critic"] = ext
    return _encoder.encode(fields)


def _built(record: RunRecord, ext: Extension, completion_id: str) -> ChatCompletion:
    answers = (record.answer, *record.answer.more)
    return ChatCompletion(
        id=completion_id,
        object="chat.completion",
        created=int(time.time()),
        model=record.served_model,
        choices=[
            Choice(index, ResponseMessage("assistant", answer.content, answer.tool_calls), answer.finish_reason)
            for index, answer in enumerate(answers)
        ],
        usage=ext.tokens.total,
        adapter_critic=ext,
    )


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def error_response(
    error: APIError, headers: Mapping[str, str] | None = None, redact: Callable[[str], str] | None = None
) -> Response:
    """Any error as its OpenAI-envelope response (`render_error`), with `headers` added."""
    rendered = render_error(error, redact)
    return Response(
        rendered.body, status_code=rendered.status, headers={**rendered.headers, **(headers or {})}, media_type=JSON
    )
