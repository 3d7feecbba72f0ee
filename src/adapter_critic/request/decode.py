"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Decoding and validating a chat-completions request body (each field's rules: docs/reference/http.md).

The body is decoded once as `dict[str, msgspec.Raw]`, so every field we do not read is forwarded
upstream byte for byte, and once more into small typed views for the few fields we do read.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from ..core import ChatRequest, Message
from ..errors import RequestError
from ..workflows import registry
from .overrides import NonEmpty, Overrides, schema

# Fields that are ours or that we rewrite; every other top-level field is forwarded as given.
_OWN_FIELDS = frozenset({"model", "messages", "x_adapter_critic", "extra_body"})


class _StreamOptions(msgspec.Struct, gc=False):
    include_usage: bool = False


_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_messages_decoder = msgspec.json.Decoder(Annotated[list[Message], msgspec.Meta(min_length=1)])
_str_decoder = msgspec.json.Decoder(str)
_bool_decoder = msgspec.json.Decoder(bool)
_stream_options_decoder = msgspec.json.Decoder(_StreamOptions)


def decode_fields(body: bytes) -> dict[str, msgspec.Raw]:
    """The body's top-level keys with their values left as raw JSON; 400 unless it is a JSON object."""
    # JSON is UTF-8 (RFC 8259). msgspec checks only the strings it decodes, so without this a field that is
    # forwarded as raw bytes could carry invalid UTF-8 upstream, and a decoded one would fail with UnicodeDecodeError.
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RequestError(f"The request body is not valid JSON: not UTF-8 at byte {exc.start}.") from None
    try:
        return _fields_decoder.decode(body)
    except msgspec.DecodeError:
        pass
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise RequestError("The request body is not valid JSON.") from None
    raise RequestError("The request body must be a JSON object.")


def decode_request(body: bytes, *, max_messages: int | None = None) -> ChatRequest:
    """Validate a chat-completions body; raises `RequestError` (400) naming the offending field.

    `max_messages` bounds the length of `messages` (the server's `max_messages`).
    """
    try:
        request = _decode_request(body, max_messages)
        request.split_deep_messages()
        return request
    except RecursionError:
        # msgspec refuses nesting deeper than the interpreter's recursion limit (about 1000 levels).
        raise RequestError("The request body is nested too deeply.") from None


def _decode_request(body: bytes, max_messages: int | None) -> ChatRequest:
    fields = decode_fields(body)
    if "extra_body" not in fields and "x_adapter_critic" not in fields:
        fast = _decode_plain(body, fields, max_messages)
        if fast is not None:
            return fast

    model = _decode(fields, "model", _str_decoder)
    if not model:
        raise RequestError("`model` must be a non-empty string.", param="model")

    raw_messages_value = fields.get("messages")
    if raw_messages_value is None:
        raise RequestError("`messages` is required: a non-empty array of message objects.", param="messages")
    messages = _decode(fields, "messages", _messages_decoder)
    if max_messages is not None and len(messages) > max_messages:
        raise RequestError(
            f"`messages` has {len(messages)} messages; this server accepts at most {max_messages} (max_messages).",
            param="messages",
        )

    extra: dict[str, msgspec.Raw] = {}
    nested_overrides: msgspec.Raw | None = None
    if "extra_body" in fields:
        try:
            extra = _fields_decoder.decode(fields["extra_body"])
        except msgspec.DecodeError:
            raise RequestError("`extra_body` must be a JSON object.", param="extra_body") from None
        nested_overrides = extra.pop("x_adapter_critic", None)

    overrides: Overrides | None = None
    overrides_param = "x_adapter_critic"
    if "x_adapter_critic" in fields:
        overrides = _decode_overrides(fields["x_adapter_critic"], overrides_param)
    elif nested_overrides is not None:
        overrides_param = "extra_body.x_adapter_critic"
        overrides = _decode_overrides(nested_overrides, overrides_param)

    # Other keys of a raw `extra_body` are forwarded too; top-level fields win on the same key. Our own
    # fields are never taken from it: `model`/`messages` are the top-level ones, and a nested `extra_body`
    # must not reach the upstream.
    options: dict[str, Any] = {key: value for key, value in extra.items() if key not in _OWN_FIELDS}
    options.update((key, value) for key, value in fields.items() if key not in _OWN_FIELDS)

    stream = False
    include_usage = False
    if "stream" in options:
        stream = _decode(options, "stream", _bool_decoder, nullable=True) or False
    if "stream_options" in options:
        stream_options = _decode(options, "stream_options", _stream_options_decoder, nullable=True)
        include_usage = bool(stream_options and stream_options.include_usage)

    return ChatRequest(
        model=model,
        messages=messages,
        messages_json=raw_messages_value,
        options=options,
        overrides=overrides,
        overrides_param=overrides_param,
        stream=stream,
        include_usage=include_usage,
    )


class _PlainView(msgspec.Struct, gc=False):
    """A request without overrides, validated in one typed pass (the common case)."""

    model: NonEmpty
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    stream: bool | None = None
    stream_options: _StreamOptions | None = None


_plain_decoder = msgspec.json.Decoder(_PlainView)


def _decode_plain(body: bytes, fields: dict[str, msgspec.Raw], max_messages: int | None) -> ChatRequest | None:
    """The fast path for a valid request without overrides; None sends it down the field-by-field path,
    which also words the errors (naming the field) when the request is not valid."""
    try:
        view = _plain_decoder.decode(body)
    except msgspec.DecodeError:
        return None
    if max_messages is not None and len(view.messages) > max_messages:
        return None
    # Only `model` and `messages` of our own fields are here (the caller checked): the rest are the options.
    messages_json = fields.pop("messages")
    del fields["model"]
    return ChatRequest(
        model=view.model,
        messages=view.messages,
        messages_json=messages_json,
        options=fields,
        stream=bool(view.stream),
        include_usage=bool(view.stream_options and view.stream_options.include_usage),
    )


def _decode_overrides(raw: msgspec.Raw, where: str) -> Overrides:
    known = schema()
    try:
        decoded = known.decoder.decode(raw)
        given = {key: value for key, value in msgspec.structs.asdict(decoded).items() if value is not None}
        known.check_settings(given)
    except msgspec.ValidationError as exc:
        message, param = locate(str(exc), where)
        if message.startswith("Object contains unknown field"):
            names = ", ".join(known.names)
            raise RequestError(f"`{param}`: {message}. Known override fields: {names}.", param=param) from None
        choices = known.choices.get(param.rpartition(".")[2], ())
        if choices and message.startswith("Invalid enum value"):
            message += f"; must be one of {', '.join(map(repr, choices))}"
        raise RequestError(f"`{param}`: {message}.", param=param) from None
    except msgspec.DecodeError:
        raise RequestError(f"`{where}` must be a JSON object.", param=where) from None
    overrides = Overrides(**given)
    if overrides.mode is not None and overrides.mode not in registry.workflows():
        modes = ", ".join(registry.names())
        message = f"`{where}.mode`: unknown mode {overrides.mode!r}; must be one of {modes}."
        raise RequestError(message, param=f"{where}.mode")
    return overrides


def _decode(fields: dict[str, msgspec.Raw], name: str, decoder: Any, *, nullable: bool = False) -> Any:
    raw = fields.get(name)
    if raw is None:
        raise RequestError(f"`{name}` is required.", param=name)
    if nullable and bytes(raw).strip() == b"null":
        return None
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message, param = locate(str(exc), name)
        if param.endswith(".role") and message.startswith("Invalid enum value"):
            message += "; must be one of system, developer, user, assistant, tool"
        raise RequestError(f"`{param}`: {message}.", param=param) from None


_FIELD_ERROR = re.compile(r"Object (?:contains unknown|missing required) field `(?P<key>[^`]*)`")


def locate(message: str, where: str) -> tuple[str, str]:
    """msgspec says "Expected `str`, got `int` - at `$[1].role`": split it into the message and the
    parameter it is about (`messages[1].role`), which for a missing or unknown field is that field."""
    head, sep, tail = message.rpartition(" - at `$")
    if sep:
        message, where = head, f"{where}{tail.rstrip('`')}"
    field_error = _FIELD_ERROR.fullmatch(message)
    if field_error is not None:
        where = f"{where}.{field_error.group('key')}"
    return message, where
