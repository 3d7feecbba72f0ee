"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A workflow's settings, each declared once: the `PerRequest` mark on a `Settings` field lets a request choose it, and
`request_settings` derives from those marks the Struct a request's choices are decoded into (`RequestSettings`).

A setting a request may choose is typed for the request as it is for the config, or stricter: `cap` lowers its
upper bound (a number's highest value, a list's most items, a text's most characters) — a setting that costs
upstream calls may be raised further by the operator than by a caller — `items` gives the type of a list's items as
a request gives them (a panel lens without its `target`: where a call goes is the operator's) and `pattern` what a
request's text must match. Each field of the derived Struct is optional and defaults to None: a setting the request
does not give keeps the served model's value.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
import msgspec.inspect

__all__ = ["PerRequest", "request_settings"]

# Every constraint and annotation a `msgspec.Meta` holds, to make one with some of them changed.
_META = (
    "gt",
    "ge",
    "lt",
    "le",
    "multiple_of",
    "pattern",
    "min_length",
    "max_length",
    "tz",
    "title",
    "description",
    "examples",
    "extra_json_schema",
    "extra",
)


@dataclass(frozen=True, slots=True)
class PerRequest:
    """Marks a `Settings` field a request may choose (`x_adapter_critic.<key>`), in `Annotated[...]`.

    Attributes:
        cap: the most a request may give, below the config's own bound: a number's highest value, a list's most
            items, a text's most characters (None: the config's bound).
        items: the type a request gives a list's items in, instead of the setting's own (None: the same).
        pattern: a regular expression a request's text must match, besides the setting's own constraints.
    """

    cap: int | None = None
    items: Any = None
    pattern: str | None = None


def request_settings(settings: type[msgspec.Struct]) -> type[msgspec.Struct]:
    """The Struct of the settings a request may choose: every `settings` field marked `PerRequest`, in their order,
    typed as the mark says and defaulting to None (named as `settings` is, `…Settings` → `…RequestSettings`)."""
    hints = typing.get_type_hints(settings, include_extras=True)
    fields: list[tuple[str, Any, None]] = []
    for name in settings.__struct_fields__:
        hint = hints[name]
        metadata = getattr(hint, "__metadata__", ())
        marks = [m for m in metadata if isinstance(m, PerRequest)]
        if not marks:
            continue
        if len(marks) > 1:
            raise TypeError(f"{settings.__qualname__}.{name}: more than one PerRequest mark")
        fields.append((name, _requested(typing.get_args(hint)[0], metadata, marks[0], name) | None, None))
    base = settings.__name__.removesuffix("Settings")
    return msgspec.defstruct(
        f"{base}RequestSettings",
        fields,
        module=settings.__module__,
        forbid_unknown_fields=True,
        frozen=True,
        kw_only=True,
    )


def _requested(kind: Any, metadata: tuple[Any, ...], mark: PerRequest, name: str) -> Any:
    """A setting's type (`kind`, constrained by the `Meta`s in `metadata`) as a request may give it."""
    constraints: dict[str, Any] = {}
    for meta in metadata:
        if isinstance(meta, msgspec.Meta):
            constraints.update((key, value) for key in _META if (value := getattr(meta, key)) is not None)
    if mark.items is not None:
        if typing.get_origin(kind) is not list:
            raise TypeError(f"{name}: PerRequest(items=...) marks a setting that is not a list")
        kind = list[mark.items]  # type: ignore[name-defined]
    if mark.pattern is not None:
        constraints["pattern"] = mark.pattern
    if mark.cap is not None:
        info = msgspec.inspect.type_info(kind)
        if isinstance(info, msgspec.inspect.IntType | msgspec.inspect.FloatType):
            bound = "le"
            constraints.pop("lt", None)
        elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.StrType):
            bound = "max_length"
        else:
            raise TypeError(f"{name}: PerRequest(cap=...) marks a setting that is not a number, a list or a text")
        if constraints.get(bound, mark.cap) < mark.cap:
            raise TypeError(f"{name}: PerRequest(cap={mark.cap}) is above the setting's own bound")
        constraints[bound] = mark.cap
    if not constraints:
        return kind
    annotated: Any = Annotated
    return annotated[kind, msgspec.Meta(**constraints)]
