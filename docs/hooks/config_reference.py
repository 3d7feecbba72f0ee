"""The config reference, generated from the config schema itself (an MkDocs hook, registered in mkdocs.yml).

A page line `<!-- config-schema: all -->` becomes one table per config table: the top level, a served model (with
every registered workflow's target and settings keys), an `auto` served model's own keys, a target, `[store]`,
`[telemetry]`, `[ui]`, each registered protocol's `[protocols.<name>]`, and every table found below those (a panel
lens, an `auto` model's rules). The tables walk the msgspec Structs (`msgspec.inspect`): each key's type and
constraints, its default, and its doc — the attribute docstring written under the field in the source, so a key
added in code appears here without anyone writing it. `<!-- config-schema: NAME -->` renders one section
(`workflow:critic` renders that workflow's keys).

A key without a docstring is a warning, which fails `mkdocs build --strict`. The functions below need only
msgspec and adapter_critic (the snippet tests import this module without MkDocs).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import logging
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import msgspec.inspect as mi

log = logging.getLogger("mkdocs.hooks.config_reference")

MARKER = re.compile(r"^<!-- config-schema: (?P<name>[\w:.-]+) -->$", re.MULTILINE)

# A stage target that falls back to another than `api` when it is not configured (the workflow's code decides).
_TARGET_FALLBACKS = {("panel", "coordinator"): "the `critic` target, else `api`"}

# A stage target written as another served model, whose whole workflow runs as that stage.
_SERVED_REF = '`{ served = "<id>" }`'

# Internal fields a config file never writes: a served model's other keys stand beside `mode` and are sorted into
# these when the config loads (an `auto` model's keys into `route`, documented as a section of their own).
_FLATTENED = {"targets", "served", "settings", "route"}

# The served-model keys an `auto` model takes besides its own (config/served.py's `_auto_model` checks them).
_AUTO_ALSO = ("limits", "request_limits", "shadow", "cache", "cache_ttl_seconds")
_AUTO_LINK = "[auto model](#auto-model)"


@dataclass
class Row:
    key: str
    type: str
    default: str
    doc: str


@dataclass
class Section:
    name: str  # the marker name: `top`, `served-model`, `target`, `store`, `protocol:anthropic`, `lens`, …
    title: str
    anchor: str
    intro: str
    rows: list[Row] = field(default_factory=list)


# -- reading the Structs -------------------------------------------------------------------------------------------


def field_docs(cls: type) -> dict[str, str]:
    """Each field's docstring: the string literal written right under `name: type = default` in the class body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    docs: dict[str, str] = {}
    statements = body.body
    for statement, following in itertools.pairwise(statements):
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = " ".join(inspect.cleandoc(following.value.value).split())
    return docs


def struct_doc(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _unwrap(t: mi.Type) -> tuple[mi.Type, str]:
    """A type without its `Metadata` wrapper, and the description that wrapper held."""
    if isinstance(t, mi.Metadata):
        description = (t.extra_json_schema or {}).get("description", "")
        return t.type, description
    return t, ""


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds(t: mi.IntType | mi.FloatType) -> str:
    parts = []
    if t.ge is not None and t.le is not None:
        return f" ({_number(t.ge)} to {_number(t.le)})"
    for symbol, value in (("≥", t.ge), (">", t.gt), ("≤", t.le), ("<", t.lt)):
        if value is not None:
            parts.append(f"{symbol} {_number(value)}")
    return f" ({', '.join(parts)})" if parts else ""


def type_text(t: mi.Type, links: dict[type, str]) -> str:
    """A type as the config file writes it: `integer (0 to 10)`, `"draft" or "fail"`, `list of target`."""
    t, _ = _unwrap(t)
    if isinstance(t, mi.UnionType):
        kinds = [type_text(member, links) for member in t.types if not isinstance(member, mi.NoneType)]
        return " or ".join(kinds)
    if isinstance(t, mi.BoolType):
        return "boolean"
    if isinstance(t, mi.IntType):
        return "integer" + _bounds(t)
    if isinstance(t, mi.FloatType):
        return "number" + _bounds(t)
    if isinstance(t, mi.StrType):
        if t.pattern:
            return f"string matching `{t.pattern}`"
        return "non-empty string" if t.min_length else "string"
    if isinstance(t, mi.LiteralType):
        return " or ".join(f"`{json.dumps(v)}`" for v in t.values)
    if isinstance(t, mi.StructType):
        return links.get(t.cls, f"table ({t.cls.__name__})")
    if isinstance(t, mi.ListType):
        item = type_text(t.item_type, links)
        bounds = []
        if t.min_length:
            bounds.append(f"at least {t.min_length}")
        if t.max_length is not None:
            bounds.append(f"at most {t.max_length}")
        return f"list of {item}" + (f" ({', '.join(bounds)})" if bounds else "")
    if isinstance(t, mi.DictType):
        value = type_text(t.value_type, links)
        return "table" if value in ("any", "table") else f"table of {value}"
    if isinstance(t, mi.AnyType):
        return "any"
    return type(t).__name__.removesuffix("Type").lower()


def _size(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f" ({value // size} {unit})"
    return ""


def default_text(f: mi.Field) -> str:
    if f.required:
        return "required"
    value = f.default if f.default_factory is msgspec.NODEFAULT else f.default_factory()
    if value is None:
        return "not set"
    if isinstance(value, msgspec.Struct):
        return "(table)"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float):
        return f"`{_number(value)}`"
    if isinstance(value, int):
        return f"`{value}`" + (_size(value) if f.name.endswith("_bytes") else "")
    text = json.dumps(msgspec.to_builtins(value), ensure_ascii=False)
    return f"`{text}`" if len(text) <= 40 else "built in (see the description)"


def struct_fields(cls: type[msgspec.Struct]) -> tuple[mi.Field, ...]:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return info.fields


def _structs_in(t: mi.Type) -> Iterator[type]:
    t, _ = _unwrap(t)
    if isinstance(t, mi.StructType):
        yield t.cls
    elif isinstance(t, mi.UnionType):
        for member in t.types:
            yield from _structs_in(member)
    elif isinstance(t, mi.ListType):
        yield from _structs_in(t.item_type)
    elif isinstance(t, mi.DictType):
        yield from _structs_in(t.value_type)


def rows_of(cls: type[msgspec.Struct], links: dict[type, str], *, skip: set[str] = frozenset()) -> list[Row]:
    docs = field_docs(cls)
    rows = []
    for f in struct_fields(cls):
        if f.name in skip:
            continue
        _, description = _unwrap(f.type)
        doc = docs.get(f.name) or description
        if not doc:
            log.warning("config reference: %s.%s has no docstring", cls.__qualname__, f.name)
        rows.append(Row(f.encode_name, type_text(f.type, links), default_text(f), doc))
    return rows


# -- the sections --------------------------------------------------------------------------------------------------


def sections() -> list[Section]:
    """Every config table, in the order a reader meets them."""
    from adapter_critic.config import Config, ServedModel, Target
    from adapter_critic.protocols import registry as protocols
    from adapter_critic.workflows import registry as workflows

    found: list[Section] = []
    links: dict[type, str] = {
        Config: "[top level](#top-level)",
        ServedModel: "[served model](#served-model)",
        Target: "[target](#target)",
    }
    titled = {
        "store": ("`[store]`", "store"),
        "telemetry": ("`[telemetry]`", "telemetry"),
        "ui": ("`[ui]`", "ui"),
        "prices": ('`[prices."<model or glob>"]`', "prices"),
        "pricing": ("`[pricing]`", "pricing"),
    }
    # Struct-typed top-level keys get a section of their own, linked from the top table.
    nested: list[tuple[str, type[msgspec.Struct]]] = []
    for f in struct_fields(Config):
        for cls in _structs_in(f.type):
            if cls not in links and f.name in titled:
                title, anchor = titled[f.name]
                links[cls] = f"[{title}](#{anchor})"
                nested.append((f.name, cls))
            elif cls not in links:
                links[cls] = f"[`[{f.name}]`](#{f.name})"
                titled[f.name] = (f"`[{f.name}]`", f.name)
                nested.append((f.name, cls))
    settings_structs = {mode: w.Settings for mode, w in workflows.workflows().items()}
    route = _route()
    links[route] = _AUTO_LINK
    deeper: list[type[msgspec.Struct]] = []
    # Tables inside those, inside a served model (`[[auth.keys]]`, `limits`, `shadow`), inside an `auto` model (its
    # rules and classes) and inside a workflow's settings (a panel lens): a section each.
    for owner in [ServedModel, route, *(cls for _, cls in nested), *settings_structs.values()]:
        for f in struct_fields(owner):
            for cls in _structs_in(f.type):
                if cls not in links:
                    links[cls] = f"[{cls.__name__.lower()}](#{cls.__name__.lower()})"
                    deeper.append(cls)
    protocol_settings = {name: p.Settings for name, p in protocols.protocols().items() if struct_fields(p.Settings)}

    top = Section("top", "Top level", "top-level", struct_doc(Config))
    top.rows = rows_of(Config, links)
    for row in top.rows:
        if row.key == "protocols" and protocol_settings:
            row.type = "table of " + ", ".join(f"[`[protocols.{n}]`](#protocols-{n})" for n in protocol_settings)
    found.append(top)
    found.append(served_model_section(links, settings_structs))
    found.append(auto_model_section(links))
    found.append(Section("target", "Target", "target", struct_doc(Target), rows_of(Target, links)))
    for key, cls in nested:
        title, anchor = titled[key]
        found.append(Section(key, title, anchor, struct_doc(cls), rows_of(cls, links)))
    for name, kind in protocol_settings.items():
        found.append(
            Section(
                f"protocol:{name}", f"`[protocols.{name}]`", f"protocols-{name}", struct_doc(kind), rows_of(kind, links)
            )
        )
    for cls in deeper:
        name = cls.__name__.lower()
        found.append(Section(name, cls.__name__, name, struct_doc(cls), rows_of(cls, links)))
    for mode, kind in settings_structs.items():
        found.append(workflow_section(mode, kind, links))
    found.append(request_settings_section(links))
    return found


def served_model_section(links: dict[type, str], settings: dict[str, type[msgspec.Struct]]) -> Section:
    """`[served_models.<id>]`: mode, api, on_review_error, then each registered workflow's target and settings keys,
    all written side by side in the served model's table."""
    from adapter_critic.config import ServedModel
    from adapter_critic.workflows import registry as workflows

    section = Section(
        "served-model",
        "Served model: `[served_models.<id>]`",
        "served-model",
        "A model id clients can ask for, and the workflow that answers it. Besides `mode`, `api` and "
        "`on_review_error`, a served model takes the keys of its workflow: the targets of its other stages and its "
        "settings. Each key is checked when the config loads.",
    )
    section.rows = rows_of(ServedModel, links, skip=_FLATTENED)
    modes = [f"`{name}`" for name in workflows.names()]
    for row in section.rows:
        if row.key == "mode":
            row.type = " or ".join(modes) + f" (or a plug-in's), or `auto` (an {_AUTO_LINK})"
        elif row.key == "api":  # a target table or another served model: one of the two is required
            row.type, row.default = f"{links[_target()]} or {_SERVED_REF}", "required"
    drafting = ", ".join(f"`{name}`" for name, w in workflows.workflows().items() if w.reviews_draft)
    draft = Row(
        "draft",
        _SERVED_REF,
        "the `api` target",
        "Another served model whose answer is the draft its later stages review, in place of the API model's first "
        f"call. Used by: {drafting}.",
    )
    by_key: dict[str, Row] = {"draft": draft}
    for mode, workflow in workflows.workflows().items():
        for key in workflow.targets:
            row = by_key.get(key)
            if row is None:
                fallback = _TARGET_FALLBACKS.get((mode, key), "the `api` target")
                kind = f"{links[_target()]} or {_SERVED_REF}"
                row = by_key[key] = Row(key, kind, fallback, f"The target of the `{key}` stage. Used by: ")
                row.doc += f"`{mode}`"
            else:
                row.doc += f", `{mode}`"
    for row in by_key.values():
        row.doc = row.doc if row.doc.endswith(".") else row.doc + "."
    for mode, kind in settings.items():
        for setting in rows_of(kind, links):
            row = by_key.get(setting.key)
            if row is None:
                setting.doc += f" Used by: `{mode}`."
                by_key[setting.key] = setting
            elif row.type.startswith(links[_target()]):  # `coordinator`: a target, or `false` (that stage off)
                row.type += f" or {setting.type}"
                row.doc = row.doc.rstrip(".") + f". {setting.doc}"
            else:
                row.doc = row.doc.rstrip(".") + f", `{mode}`."
    section.rows += by_key.values()
    return section


def _target() -> type:
    from adapter_critic.config import Target

    return Target


def _route() -> type[msgspec.Struct]:
    """The Struct of an `auto` model's own keys: the type of the served model's `route` field."""
    from adapter_critic.config import ServedModel

    field = next(f for f in struct_fields(ServedModel) if f.name == "route")
    return next(iter(_structs_in(field.type)))


def auto_model_section(links: dict[type, str]) -> Section:
    """An `auto` served model (`mode = "auto"`): its own keys, written beside `mode` in its table, and the served-model
    keys it takes besides."""
    route = _route()
    also = ", ".join(f"`{key}`" for key in _AUTO_ALSO)
    intro = (
        f"{struct_doc(route)} Its keys stand beside `mode` in its `[served_models.<id>]` table; besides them, an "
        f"auto model takes only {also} (as a [served model](#served-model) does). It has no `api` or other stage "
        "target of its own: each candidate runs with its own workflow and targets."
    )
    return Section("auto-model", 'Auto model: `mode = "auto"`', "auto-model", intro, rows_of(route, links))


def workflow_section(mode: str, kind: type[msgspec.Struct], links: dict[type, str]) -> Section:
    """One workflow's own served-model keys (its targets and settings), for its guide."""
    from adapter_critic.workflows import registry as workflows

    workflow = workflows.get(mode)
    target = links[_target()]
    rows = [
        Row(key, target, _TARGET_FALLBACKS.get((mode, key), "the `api` target"), f"The `{key}` stage's target.")
        for key in workflow.targets
    ]
    for setting in rows_of(kind, links):
        same = next((row for row in rows if row.key == setting.key), None)
        if same is not None:
            same.type += f" or {setting.type}"
            same.doc += f" {setting.doc}"
        else:
            rows.append(setting)
    return Section(f"workflow:{mode}", f"`{mode}` keys", f"workflow-{mode}", "", rows)


def request_settings_section(links: dict[type, str]) -> Section:
    """`overrides`: every setting a request may choose (`x_adapter_critic.<key>`), typed as the workflows'
    `RequestSettings` take it (as strict as the config, or stricter), with its meaning from the served-model key of
    the same name, the modes that read it and whether a served model's `request_limits` may cap it."""
    from adapter_critic.workflows import registry as workflows
    from adapter_critic.workflows.lenses import RequestLens
    from adapter_critic.workflows.mixture_of_agents import RequestProposer

    links = {
        **links,
        RequestLens: "[lens](#lens) (`name` and `system_prompt`: a request gives no `target`)",
        RequestProposer: "[proposer](#proposer) (`options` of `temperature`, `top_p`, `seed` only: no `target`)",
    }
    by_key: dict[str, Row] = {}
    for mode, workflow in workflows.workflows().items():
        docs = {row.key: row.doc for row in rows_of(workflow.Settings, links)}
        for f in struct_fields(workflow.RequestSettings):
            row = by_key.get(f.encode_name)
            if row is not None:
                row.doc = row.doc.rstrip(".") + f", `{mode}`."
                continue
            capped = workflows.limitable().get(f.name)
            cap = {"value": "its value", "items": "its number of items"}.get(capped or "", "")
            limit = f" `request_limits.{f.name}` caps {cap}." if cap else ""
            row = Row(f.encode_name, type_text(f.type, links), "the served model's", docs.get(f.name, ""))
            if not row.doc:
                log.warning("config reference: %s.%s has no docstring", workflow.Settings.__qualname__, f.name)
            row.doc = f"{row.doc}{limit} Used by: `{mode}`."
            by_key[f.encode_name] = row
    return Section("overrides", "Per-request settings", "per-request-settings", "", list(by_key.values()))


# -- rendering -----------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[Row], *, links: bool = True) -> str:
    if not rows:
        return "This workflow has no keys of its own besides `mode`, `api` and `on_review_error`.\n"
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for row in rows:
        kind = row.type if links else re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", row.type)
        lines.append(f"| `{row.key}` | {_cell(kind)} | {_cell(row.default)} | {_cell(row.doc)} |")
    return "\n".join(lines) + "\n"


def render(name: str, *, base: str = "") -> str:
    """The markdown a marker stands for; `base` is the config reference page's path from the page, for links."""
    found = sections()
    if name == "all":
        parts = []
        for section in found:
            if section.name.startswith("workflow:") or section.name == "overrides":
                continue
            parts.append(f"## {section.title} {{#{section.anchor}}}\n")
            if section.intro:
                parts.append(section.intro + "\n")
            parts.append(table(section.rows))
        return "\n".join(parts)
    for section in found:
        if section.name == name:
            text = table(section.rows)
            return re.sub(r"\]\(#", f"]({base}#", text)
    raise KeyError(f"config-schema: no section {name!r}; known: {', '.join(s.name for s in found)}")


def replace_markers(markdown: str, *, base: str = "") -> str:
    return MARKER.sub(lambda match: render(match.group("name"), base=base), markdown)


# -- the MkDocs hook -----------------------------------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- config-schema:" not in markdown:
        return markdown
    depth = page.file.src_uri.count("/")
    base = "../" * depth + "reference/config.md" if page.file.src_uri != "reference/config.md" else ""
    try:
        return replace_markers(markdown, base=base)
    except KeyError as exc:
        log.warning("%s: %s", page.file.src_uri, exc)
        return markdown
