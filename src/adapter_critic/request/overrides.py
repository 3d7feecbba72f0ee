"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`x_adapter_critic`: a request's overrides of its served model, with fields derived from the registered workflows,
plug-ins included — `mode`; `<key>_model` and `<key>_base_url` for `api` and every workflow's stage-target keys
(`Workflow.targets`); every setting a workflow lets a request choose (`Workflow.RequestSettings`); `progress`
(streaming only: a chunk with an empty delta and `adapter_critic.progress` as each earlier stage finishes); and
`cache` (a served model with `cache = true`: `true` lets the exact-match cache answer a request that is not
deterministic, `false` keeps it from answering one that is: docs/guides/cache.md).

The fields are known once the workflows are loaded (entry points, on first use), so they are made then, once
(`schema`). They are validated like the config's: an unknown field is refused naming it and the known ones, a value
of the wrong type naming its path; a setting more than one workflow declares is checked against each of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import msgspec.inspect

from ..workflows import registry

if TYPE_CHECKING:
    from ..workflows.base import Workflow

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


@dataclass(frozen=True, slots=True)
class Schema:
    """The override fields of the registered workflows."""

    decoder: msgspec.json.Decoder[Any]  # into a Struct of every field, each None unless given
    names: tuple[str, ...]  # every field, in the order they are listed in messages
    roles: tuple[str, ...]  # `api` and every stage-target key
    settings: tuple[type[msgspec.Struct], ...]  # every workflow's `RequestSettings` that has fields
    choices: dict[str, tuple[Any, ...]]  # the values a setting of fixed choices takes (`judging`), for messages

    def check_settings(self, given: dict[str, Any]) -> None:
        """Check the given settings against every workflow that declares them (msgspec.ValidationError if not)."""
        for kind in self.settings:
            chosen = {key: value for key, value in given.items() if key in kind.__struct_fields__}
            if chosen:
                msgspec.convert(chosen, kind)


@functools.cache
def schema() -> Schema:
    """The override fields, made from the registered workflows on first use."""
    roles = ("api", *registry.target_keys())
    fields: dict[str, Any] = {"mode": NonEmpty}
    for role in roles:
        fields[f"{role}_model"] = NonEmpty
        fields[f"{role}_base_url"] = NonEmpty
    settings: dict[type[msgspec.Struct], None] = {}
    for workflow in registry.workflows().values():
        for field in msgspec.structs.fields(workflow.RequestSettings):
            if field.name != "progress":
                fields.setdefault(field.name, field.type)  # typed as the first declares it; `check_settings` does all
                settings[workflow.RequestSettings] = None
    fields["progress"] = bool
    fields["cache"] = bool
    fields["effort"] = Annotated[float, msgspec.Meta(ge=0, le=1)]
    kind = msgspec.defstruct(
        "Overrides",
        [(name, type_ | None, None) for name, type_ in fields.items()],
        forbid_unknown_fields=True,
        kw_only=True,
    )
    choices = {name: values for name, type_ in fields.items() if (values := _choices(type_))}
    return Schema(msgspec.json.Decoder(kind), tuple(fields), roles, tuple(settings), choices)


def _choices(type_: Any) -> tuple[Any, ...]:
    """The values of a `Literal[...]` type (alone, or with None)."""
    info = msgspec.inspect.type_info(type_)
    if isinstance(info, msgspec.inspect.UnionType):
        info = next((t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)), info)
    return info.values if isinstance(info, msgspec.inspect.LiteralType) else ()


class Overrides:
    """A request's `x_adapter_critic`: the fields it gave, by name; a field it did not give (or gave as null) reads
    as None, as `overrides.critic_model`."""

    __slots__ = ("given",)

    def __init__(self, **given: Any) -> None:
        names = schema().names
        unknown = [name for name in given if name not in names]
        if unknown:
            raise TypeError(f"unknown override field(s): {', '.join(unknown)}; known: {', '.join(names)}")
        self.given: dict[str, Any] = {name: given[name] for name in names if given.get(name) is not None}

    @staticmethod
    def fields() -> tuple[str, ...]:
        """Every override field of the registered workflows."""
        return schema().names

    def __getattr__(self, name: str) -> Any:
        if name in schema().names:
            return self.given.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Overrides) and self.given == other.given

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Overrides({', '.join(f'{name}={value!r}' for name, value in self.given.items())})"

    @property
    def mode(self) -> str | None:
        mode: str | None = self.given.get("mode")
        return mode

    @property
    def effort(self) -> float | None:
        effort: float | None = self.given.get("effort")
        return effort

    @property
    def progress(self) -> bool | None:
        progress: bool | None = self.given.get("progress")
        return progress

    def base_urls(self) -> dict[str, str]:
        """Every `*_base_url` given, by field name."""
        found = ((f"{role}_base_url", self.given.get(f"{role}_base_url")) for role in schema().roles)
        return {name: url for name, url in found if url is not None}

    def target(self, role: str) -> tuple[str | None, str | None]:
        """The `<role>_model` and `<role>_base_url` given for a stage target (None where not given)."""
        return self.given.get(f"{role}_model"), self.given.get(f"{role}_base_url")

    def settings(self, workflow: Workflow) -> dict[str, Any]:
        """The settings given that `workflow` lets a request choose (`RequestSettings`)."""
        keys = workflow.RequestSettings.__struct_fields__
        return {key: value for key, value in self.given.items() if key in keys}
