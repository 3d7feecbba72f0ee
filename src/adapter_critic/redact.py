"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Keeping API keys out of everything the server answers or logs (docs/guides/security.md).

Secrets are the values of the env vars that hold keys — upstream keys, and the comma-separated inbound
keys of `auth_api_keys_env` — read each time, so rotated keys are covered. Each is replaced by `***` in
every form an upstream may echo it in: as is, JSON-escaped (also with `\\/`), repr-escaped and
percent-encoded. As a second line of defence any `Bearer <token>` and any URL userinfo
(`scheme://user:pass@`) is masked too, whatever the token.

`protect_logs` adds a filter to the `adapter_critic` logger that does the same to every record, its
traceback included (`exc_text`; `exc_info` is left for handlers that need the exception object), with the secrets
of the app whose work logged it: each app or middleware binds its own `Secrets` around everything it runs
(`masked_logs`), so two in one process neither share nor keep each other's. A record logged outside any app gets
the bearer and userinfo masks only.
"""

from __future__ import annotations

import contextvars
import logging
import os
import re
import urllib.parse
from collections.abc import Iterable, Sequence

import msgspec

MASK = "***"

_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\\-]{8,}=*")
# Userinfo may not hold a `/`, but a hostile URL may: mask up to the `@` anyway (at worst, a path is masked too).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s@\"'<>]+@")
# Log records skip values shorter than this: placeholder keys of local servers (`x`, `EMPTY`) are no secret,
# and masking every `x` would make the logs unreadable. Answers to clients mask every configured value.
_MIN_LOGGED_SECRET = 8


class Secrets:
    """The values of the env vars that hold API keys, read fresh each time so keys can rotate."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = tuple(sorted(set(names)))

    def values(self, *extra: str | None) -> list[str]:
        """Every form of every secret, plus of `extra` (a forwarded caller's token)."""
        return secret_values(self._names, extra)

    def redact(self, text: str, *extra: str | None) -> str:
        return redact(text, self.values(*extra))

    def redact_bytes(self, data: bytes, *extra: str | None) -> bytes:
        return redact_bytes(data, self.values(*extra))


def secret_values(env_names: Iterable[str], extra: Iterable[str | None] = ()) -> list[str]:
    """Every form of every secret held by `env_names` (comma-separated lists included) and of `extra`,
    longest first so that a secret containing another is replaced whole."""
    found: set[str] = set()
    raw_values = [os.environ.get(name, "") for name in env_names]
    for raw in [*raw_values, *(value for value in extra if value)]:
        for value in {raw, raw.strip(), *(part.strip() for part in raw.split(","))}:
            if value.strip():
                found.update(_forms(value))
    return sorted(found, key=len, reverse=True)


def redact(text: str, values: Iterable[str]) -> str:
    """`text` with every value, every bearer token and every URL userinfo masked."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    if "bearer" in text.lower():  # the patterns only where they can match: a text without them is scanned once
        text = _BEARER.sub(rf"\g<1>{MASK}", text)
    return redact_userinfo(text)


# What JSON writes outside its strings: numbers, punctuation, keywords.
_JSON_SYNTAX = re.compile(r"[-+0-9.eE,:\[\]{}\s]+|true|false|null")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def json_syntax_among(values: Iterable[str]) -> bool:
    """Whether a value could match a JSON text outside its strings (a placeholder key such as `3` matches a
    number): such values must be masked with `redact_json_strings`, or the masked text is no longer JSON."""
    return any(_JSON_SYNTAX.fullmatch(value) for value in values)


def redact_json_strings(text: str, values: Sequence[str]) -> str:
    """`redact` inside each string of the JSON `text` only: its numbers and keywords are left whole."""
    return _JSON_STRING.sub(lambda string: redact(string.group(), values), text)


def redact_bytes(data: bytes, values: Sequence[str]) -> bytes:
    """`redact` for a body; bytes that are not UTF-8 are kept as they are. A JSON body stays JSON: when a value could
    match its syntax (a key made of digits), it is masked inside the body's strings only (`redact_json_strings`)."""
    text = data.decode("utf-8", "surrogateescape")
    if json_syntax_among(values) and _is_json(data):
        return redact_json_strings(text, values).encode("utf-8", "surrogateescape")
    return redact(text, values).encode("utf-8", "surrogateescape")


def _is_json(data: bytes) -> bool:
    try:
        msgspec.json.decode(data, type=msgspec.Raw)  # checked whole, no object built
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


def redact_userinfo(text: str) -> str:
    """`http://user:pass@host` -> `http://***@host`, anywhere in `text`."""
    if "@" not in text or "://" not in text:  # `@` first: a single character is found far faster
        return text
    return _USERINFO.sub(rf"\g<1>{MASK}@", text)


def _forms(value: str) -> set[str]:
    json_form = msgspec.json.encode(value).decode()[1:-1]
    return {
        value,
        json_form,
        json_form.replace("/", "\\/"),
        repr(value)[1:-1],
        urllib.parse.quote(value, safe=""),
    }


# -- logs -----------------------------------------------------------------------------------------------------------

_log_secrets: contextvars.ContextVar[Secrets | None] = contextvars.ContextVar(
    "adapter_critic_log_secrets", default=None
)


class masked_logs:
    """Every record logged inside the block (and in tasks started from it) has `secrets` masked.

    A class rather than a generator-based context manager: it runs for every request."""

    __slots__ = ("_secrets", "_token")

    def __init__(self, secrets: Secrets) -> None:
        self._secrets = secrets

    def __enter__(self) -> None:
        self._token = _log_secrets.set(self._secrets)

    def __exit__(self, *exc: object) -> None:
        _log_secrets.reset(self._token)


class _RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _log_secrets.get()
        values = [v for v in secrets.values() if len(v) >= _MIN_LOGGED_SECRET] if secrets is not None else []
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: let logging report it as it always does
            return True
        clean = redact(message, values)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            trace = logging.Formatter().formatException(record.exc_info)
            clean_trace = redact(trace, values)
            if clean_trace != trace:
                record.exc_text = clean_trace  # formatters use it instead of formatting exc_info again
        if record.stack_info:
            record.stack_info = redact(record.stack_info, values)
        return True


_filter = _RedactingFilter()


def protect_logs() -> None:
    """Mask the bound secrets (`masked_logs`) and any bearer token in every record of the `adapter_critic` logger."""
    logger = logging.getLogger("adapter_critic")
    if _filter not in logger.filters:
        logger.addFilter(_filter)
