"""Store records as table rows (`reads` turns them back into the API's shapes).

Writing (in the background writer, never on a request's task): every text value is JSON-encoded and then has
every secret masked (`redact`) — the values of the configured key env vars in each form an upstream may echo
them, any bearer token, any URL userinfo — whatever the capture level. Under capture `metadata` no message text is
kept: no messages, no stage outputs, no answer text, intermediate values null.
"""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..core import Usage
from ..errors import APIError, UpstreamError, render_error
from ..events import StageFinished
from ..redact import json_syntax_among, redact, redact_json_strings, secret_values
from .recorder import RunClosed, RunOpened, StageDone
from .records import (
    AttemptError,
    FromStages,
    StoredAnswer,
    StoredAttempt,
    StoredError,
    Tokens,
)

_encoder = msgspec.json.Encoder()
# `model@base_url`: the first `@` followed by a URL scheme or a path (a model name may hold an `@` too).
_LABEL = re.compile(r"^(.*?)@((?:[A-Za-z][A-Za-z0-9+.-]*://|/).*)$", re.DOTALL)


class Cleaner:
    """JSON encoding and redaction with one batch's secret values (`redact.Secrets.values()`).

    Names that repeat over a batch's runs (served models, targets, a stage's attempts when none failed) are
    cleaned once per batch (`name`, `attempts`)."""

    def __init__(self, values: Sequence[str]) -> None:
        self.values = values
        self._names: dict[Any, str] = {}
        self._strings_only = json_syntax_among(values)  # a key made of digits: mask JSON inside its strings only

    def text(self, value: str | None) -> str | None:
        return None if value is None else redact(value, self.values)

    def name(self, value: str) -> str:
        """`text` of a short value that repeats (a model, a host), remembered for the batch."""
        cleaned = self._names.get(value)
        if cleaned is None:
            cleaned = self._names[value] = redact(value, self.values)
        return cleaned

    def attempts(self, finished: StageFinished) -> str:
        """A stage's attempts as stored: JSON of `StoredAttempt`s."""
        if any(a.error is not None for a in finished.attempts):
            attempts = [
                StoredAttempt(*target_parts(a.target), error=_attempt_error(a.error, self)) for a in finished.attempts
            ]
            return self.json(attempts) or "[]"
        labels = tuple(a.target for a in finished.attempts)  # none failed: the same targets give the same JSON
        cleaned = self._names.get(labels)
        if cleaned is None:
            cleaned = self._names[labels] = self.json([StoredAttempt(*target_parts(label)) for label in labels]) or "[]"
        return cleaned

    def json(self, value: Any) -> str | None:
        """`value` as JSON with its secrets masked in its strings (a key made of digits leaves numbers whole)."""
        if value is None:
            return None
        text = _encoder.encode(value).decode("utf-8", "surrogateescape")
        return redact_json_strings(text, self.values) if self._strings_only else redact(text, self.values)

    def for_secret(self, secret: str | None) -> Cleaner:
        """This cleaner masking `secret` too (a forwarded caller's token)."""
        if secret is None:
            return self
        return Cleaner(sorted({*secret_values((), (secret,)), *self.values}, key=len, reverse=True))


@functools.lru_cache(maxsize=1024)
def target_parts(label: str) -> tuple[str, str]:
    """A target label (`model@base_url`, userinfo already masked) as its model and host — never a key."""
    match = _LABEL.match(label)
    if match is None:
        return label, ""
    model, base_url = match.groups()
    if base_url.startswith("/"):
        return model, "in-process"
    host = urllib.parse.urlsplit(base_url).netloc.rpartition("@")[2]
    return model, host


def _attempt_error(error: UpstreamError | None, clean: Cleaner) -> AttemptError | None:
    if error is None:
        return None
    return AttemptError(kind=error.kind, message=clean.text(error.message) or "", status=error.upstream_status)


def _usage(usage: Usage) -> Tokens:
    return Tokens(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


class _Envelope(msgspec.Struct):
    message: str = ""
    type: str = "server_error"
    param: str | None = None
    code: str | int | None = None


def stored_error(error: APIError, clean: Cleaner) -> StoredError:
    """The §7 error the client got, as stored."""
    rendered = render_error(error)
    try:
        inner = msgspec.json.decode(rendered.body, type=dict[str, _Envelope])["error"]
    except (msgspec.DecodeError, KeyError):
        inner = _Envelope(message=error.message, type=error.error_type)
    code = None if inner.code is None else str(inner.code)
    return StoredError(rendered.status, inner.type, clean.text(inner.message) or "", inner.param, code)


# -- records -> rows ------------------------------------------------------------------------------------------------


def opened_row(record: RunOpened, instance: str, clean: Cleaner) -> dict[str, Any]:
    request = record.request
    options: dict[str, Any] = dict(request.options)
    if request.stream:
        options["stream"] = True
    if request.overrides is not None:
        options[request.overrides_param] = request.overrides
    messages = request.messages_json if record.capture == "full" else None
    return {
        "run_id": record.run_id,
        "request_id": record.request_id,
        "served_model": clean.name(record.served_model),
        "mode": record.mode,
        "stream": record.stream,
        "status": "running",
        "degraded": False,
        "started_at": record.started_at,
        "capture": record.capture,
        "instance": instance,
        "request": clean.json({"options": options, "messages": messages}),
    }


def _stage_status(finished: StageFinished) -> str:
    if finished.error is not None:
        return "error"
    # No error, yet no attempt answered: the call was cancelled while an attempt was under way.
    answered = finished.attempts and finished.attempts[-1].error is None
    return "ok" if answered else "cancelled"


def stage_row(record: StageDone, clean: Cleaner) -> dict[str, Any]:
    finished = record.finished
    model, host = target_parts(finished.target)
    full = record.capture == "full"
    return {
        "run_id": record.run_id,
        "idx": record.index,
        "stage": finished.stage,
        "status": _stage_status(finished),
        "target_model": clean.name(model),
        "target_host": clean.name(host),
        "started_offset_ms": record.started_offset_ms,
        "elapsed_ms": round(finished.elapsed_ms, 3),
        "attempts": clean.attempts(finished),
        "usage": clean.json(finished.usage),
        "usage_reported": finished.reported,
        "messages": clean.json(record.messages) if full else None,
        "output": clean.text(finished.output) if full else None,
        "error": clean.json(_attempt_error(finished.error, clean)),
        "request_messages": full and record.request_messages,
    }


# The columns a run's end sets (`closed_row`, besides `b_run_id`: the run it ends).
CLOSED_COLUMNS = (
    "status", "degraded", "finished_at", "duration_ms", "usage", "error", "intermediate", "answer", "from_stages"
)  # fmt: skip

# A run's stage outputs written in the same batch as its end: (stage index, output text).
Outputs = Sequence[tuple[int, str]]


def closed_row(record: RunClosed, clean: Cleaner, outputs: Outputs = ()) -> dict[str, Any]:
    """The columns a run's end sets. A text of the answer or of `intermediate` that is one of `outputs` is kept
    once, in that stage's row (written in the same transaction), and named in `from_stages`."""
    full = record.capture == "full"
    answer = record.answer
    content = answer.content if full else None
    intermediate = record.intermediate if full else dict.fromkeys(record.intermediate)
    from_stages = None
    if outputs and full:
        found = _kept_once(outputs, content, intermediate)
        if found.answer is not None:
            content = None
        if found.intermediate:  # null where the stage's row holds the text
            intermediate = {key: None if key in found.intermediate else v for key, v in intermediate.items()}
        if found.answer is not None or found.intermediate:
            from_stages = clean.json(found)
    stored_answer = StoredAnswer(answer.finish_reason, content, answer.tool_calls if full else None)
    return {
        "b_run_id": record.run_id,
        "status": record.status,
        "degraded": record.status == "degraded",
        "finished_at": record.finished_at,
        "duration_ms": record.duration_ms,
        "usage": clean.json(_usage(record.usage)),
        "error": clean.json(stored_error(record.error, clean) if record.error is not None else None),
        "intermediate": clean.json(intermediate),
        "answer": clean.json(stored_answer),
        "from_stages": from_stages,
    }


def _kept_once(outputs: Outputs, content: str | None, intermediate: Mapping[str, Any]) -> FromStages:
    """Which texts are a stage's output (the latest stage's, when several said the same)."""

    def stage_of(value: Any) -> int | None:
        if type(value) is str and value:
            for index, output in reversed(outputs):
                if value is output or value == output:
                    return index
        return None

    found = FromStages(answer=stage_of(content))
    for key, value in intermediate.items():
        index = stage_of(value)
        if index is not None:
            found.intermediate[key] = index
    return found
