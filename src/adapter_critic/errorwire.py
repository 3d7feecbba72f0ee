"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The OpenAI error envelope, the one view of that wire shape: made (`error_envelope`) for every error this server
answers in OpenAI's protocol (`errors.render_error`), and read back (`read_error_body`) from an upstream's error body
or a stream's error event.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .core import Usage


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


def read_error_body(body: bytes) -> ErrorBody | None:
    """An error body (an upstream's, or one `render_error` made) as an OpenAI envelope, or None when it is not one."""
    try:
        return _envelope_decoder.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep
        return None
