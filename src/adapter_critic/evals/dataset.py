"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Eval datasets: JSONL, one item a line, each checked as it is read; a bad line is one error naming it.

An item: `id` (string or number; default: its line number), `messages` (OpenAI chat messages) or `prompt` (one
user message), and optionally `expected` (a string, or a list of acceptable strings), `metadata` (an object, kept
in the results), `schema` (a JSON Schema the `json` scorer checks the answer against), `rubric` (what a
`judge:MODEL` scorer grades against), `scorer` (this item's scorer instead of `--scorer`) and `params` (request
fields sent with it, such as `temperature`, `max_tokens` or `response_format`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from ..errors import EvalError

_PATH = re.compile(r"\s*-\s*at\s*`\$\.?(?P<path>[^`]*)`\s*$")


class DatasetError(EvalError):
    """A dataset that cannot be used; the message names the file and the line."""


class _Message(msgspec.Struct):
    role: str
    content: str | list[Any] | None = None


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    id: str | int | None = None
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    expected: str | list[str] | None = None
    metadata: dict[str, Any] = {}
    schema: dict[str, Any] | bool | None = None
    rubric: str | None = None
    scorer: str | None = None
    params: dict[str, Any] = {}


class Item(msgspec.Struct, frozen=True, kw_only=True):
    """One dataset item, ready to send."""

    id: str
    line: int
    messages: list[dict[str, Any]]
    expected: str | list[str] | None = None
    metadata: dict[str, Any] = {}
    schema: dict[str, Any] | bool | None = None
    rubric: str | None = None
    scorer: str | None = None
    params: dict[str, Any] = {}

    def expected_list(self) -> list[str]:
        if self.expected is None:
            return []
        return [self.expected] if isinstance(self.expected, str) else list(self.expected)


# Request fields an item may not set through `params`: the eval decides them.
_RESERVED_PARAMS = ("model", "messages", "stream", "n")


def load_dataset(path: Path) -> list[Item]:
    """Every item of the JSONL file at `path` (blank lines and lines starting with `//` are skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read the dataset ({getattr(exc, 'strerror', None) or exc})") from None
    items: list[Item] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("//"):
            continue
        item = parse_item(raw, number, f"{path}:{number}")
        if item.id in seen:
            raise DatasetError(f"{path}:{number}: id {item.id!r} is already used on line {seen[item.id]}")
        seen[item.id] = number
        items.append(item)
    if not items:
        raise DatasetError(f"{path}: the dataset has no items (one JSON object a line)")
    return items


def parse_item(raw: str, number: int, where: str) -> Item:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise DatasetError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{where}: an item must be a JSON object, not {type(data).__name__}")
    try:
        line = msgspec.convert(data, _Line)
    except msgspec.ValidationError as exc:
        raise DatasetError(f"{where}: {_describe(str(exc))}") from None
    if (line.messages is None) == (line.prompt is None):
        raise DatasetError(f"{where}: give either `messages` or `prompt` (exactly one)")
    messages = line.messages if line.messages is not None else [{"role": "user", "content": line.prompt}]
    if not messages:
        raise DatasetError(f"{where}: `messages` is empty")
    try:
        msgspec.convert(messages, list[_Message])
    except msgspec.ValidationError as exc:
        said = _describe(str(exc))
        raise DatasetError(f"{where}: messages{said if said.startswith('[') else ': ' + said}") from None
    reserved = [key for key in _RESERVED_PARAMS if key in line.params]
    if reserved:
        raise DatasetError(f"{where}: params.{reserved[0]}: set by the eval, not by an item")
    return Item(
        id=str(line.id) if line.id is not None else f"line-{number}",
        line=number,
        messages=messages,
        expected=line.expected,
        metadata=line.metadata,
        schema=line.schema,
        rubric=line.rubric,
        scorer=line.scorer,
        params=line.params,
    )


def _describe(message: str) -> str:
    """msgspec's "Expected `str`, got `int` - at `$.id`" as "id: Expected `str`, got `int`"."""
    unknown = re.fullmatch(r"Object contains unknown field `(?P<key>[^`]*)`(?P<rest>.*)", message)
    if unknown:
        known = ", ".join(_Line.__struct_fields__)
        return f"{unknown.group('key')}: unknown key; known keys: {known}"
    match = _PATH.search(message)
    if match is None:
        return f"(item): {message}"
    path = match.group("path") or "(item)"
    return f"{path}: {message[: match.start()]}"
