"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Turning msgspec's validation messages into the config's own: one line naming the file and the key path.

"Expected `str`, got `int` - at `$.served_models.x.api.model`" becomes
"config.toml: served_models.x.api.model: Expected `str`, got `int`"; an unknown key lists the known ones.
"""

from __future__ import annotations

import re
import typing
from typing import Any, TypeVar

import msgspec

from ..errors import ConfigError

_S = TypeVar("_S", bound=msgspec.Struct)

_PATH = re.compile(r"\s*-\s*at\s*`\$(?P<path>[^`]*)`\s*$")
_OWN_PATH = re.compile(r"(served_models|models)\.\S+: ")


# The valid values of every enum-like key, so that a wrong one is reported with the right ones.
_CHOICES: dict[str, tuple[str, ...]] = {"on_review_error": ("draft", "fail")}


def convert(data: Any, kind: type[_S], source: str, prefix: str) -> _S:
    try:
        return msgspec.convert(data, kind, str_keys=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe(source, prefix, str(exc), kind)) from None


def _known_keys(kind: type[msgspec.Struct], subpath: str) -> tuple[str, ...] | None:
    """The keys allowed in the table at `subpath` (relative to `kind`), when it is `kind` or a Struct field."""
    if not subpath:
        return kind.__struct_fields__
    for field in msgspec.structs.fields(kind):
        if field.name == subpath:
            for member in (field.type, *typing.get_args(field.type)):  # `Target | None`: the Struct in it
                if isinstance(member, type) and issubclass(member, msgspec.Struct):
                    return member.__struct_fields__
    return None


def _describe(source: str, prefix: str, msgspec_message: str, kind: type[msgspec.Struct] = msgspec.Struct) -> str:
    """Turn msgspec's "... - at `$.a.b[0]`" into "file: prefix.a.b[0]: ..."."""
    if _OWN_PATH.match(msgspec_message):  # a whole-config check that names the key path itself
        return f"{source}: {_PATH.sub('', msgspec_message)}"
    match = _PATH.search(msgspec_message)
    path = prefix
    subpath = ""
    message = msgspec_message
    if match is not None:
        subpath = match.group("path").lstrip(".")
        path = ".".join(p for p in (prefix, subpath) if p)
        message = msgspec_message[: match.start()]
    unknown = re.fullmatch(r"Object contains unknown field `(?P<key>[^`]*)`", message)
    if unknown:
        key = unknown.group("key")
        known = _known_keys(kind, subpath)
        hint = f"; known keys here: {', '.join(known)}" if known else ""
        return f"{source}: {path + '.' if path else ''}{key}: unknown key{hint}"
    if message.startswith("unknown mode"):
        return f"{source}: {path}.mode: {message}"
    if message.startswith("Invalid enum value"):
        choices = _CHOICES.get(path.rpartition(".")[2])
        if choices:
            return f"{source}: {path}: {message}; must be one of {', '.join(repr(c) for c in choices)}"
    missing = re.fullmatch(r"Object missing required field `(?P<key>[^`]*)`", message)
    if missing:
        key = missing.group("key")
        return f"{source}: {path + '.' if path else ''}{key}: required key is missing"
    return f"{source}: {path or '(top level)'}: {message}"
