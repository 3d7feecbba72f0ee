"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`Cleaner`: JSON encoding and redaction with one batch's secrets, as the run store writes every value; and what
a store keeps of a stage call's target and attempts (`target_parts`, `attempt_error`) — a model and a host, never a
key."""

from __future__ import annotations

import functools
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import UpstreamError
from ..events import StageFinished
from ..redact import json_syntax_among, redact, redact_json_strings, secret_values
from .records import AttemptError, StoredAttempt

_encoder = msgspec.json.Encoder()
# `model@base_url`: the first `@` followed by a URL scheme or a path (a model name may hold an `@` too).
_LABEL = re.compile(r"^(.*?)@((?:[A-Za-z][A-Za-z0-9+.-]*://|/).*)$", re.DOTALL)


class Cleaner:
    """JSON encoding and redaction with one batch's secret values (`redact.Secrets.values()`).

    Names that repeat over a batch's runs (served models, targets) are cleaned once per batch (`name`), and a
    stage's attempts when none failed are made once per batch (`attempts`)."""

    def __init__(self, values: Sequence[str]) -> None:
        self.values = values
        self._names: dict[str, str] = {}
        self._attempts: dict[tuple[str, ...], list[StoredAttempt]] = {}
        self._strings_only = json_syntax_among(values)  # a key made of digits: mask JSON inside its strings only

    def text(self, value: str | None) -> str | None:
        return None if value is None else redact(value, self.values)

    def name(self, value: str) -> str:
        """`text` of a short value that repeats (a model, a host), remembered for the batch."""
        cleaned = self._names.get(value)
        if cleaned is None:
            cleaned = self._names[value] = redact(value, self.values)
        return cleaned

    def attempts(self, finished: StageFinished) -> list[StoredAttempt]:
        """A stage's attempts as stored (masked with the text they are encoded in)."""
        if any(a.error is not None for a in finished.attempts):
            return [StoredAttempt(*target_parts(a.target), error=attempt_error(a.error)) for a in finished.attempts]
        labels = tuple(a.target for a in finished.attempts)  # none failed: the same targets, the same attempts
        found = self._attempts.get(labels)
        if found is None:
            found = self._attempts[labels] = [StoredAttempt(*target_parts(label)) for label in labels]
        return found

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


def attempt_error(error: UpstreamError | None) -> AttemptError | None:
    """An attempt's error as stored (its message is masked with the JSON text it is encoded in)."""
    if error is None:
        return None
    return AttemptError(kind=error.kind, message=error.message, status=error.upstream_status)
