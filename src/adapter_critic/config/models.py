"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Model names beyond the served models (`[models]`): any workflow on any upstream model by a prefix of its name, as
optillm's users write them (docs/guides/workflows.md#composing-workflows).

With `technique_prefixes = true`, `<prefix>-<model>` is served like a served model of that workflow with every stage
on `<model>` at one upstream (`upstream`, else the `passthrough` target) and the workflow's default settings:
`critic-qwen2.5-7b`, `best_of_n-qwen2.5-7b`, `moa-…` (a workflow's `aliases`). `a&b-<model>` chains them: `b`, a
workflow that reviews a draft, reviews the answer of `a-<model>`, which runs as its `draft` stage. The set is
infinite, so it is never listed, and parsed, never stored, per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Protocol

import msgspec

from ..core import DRAFT
from ..workflows import registry
from .served import ServedModel
from .target import Target

# How many served models deep a run may nest (a stage run by a served model whose stage is run by another…): a run
# and at most this many levels of runs below it, so a chain has at most `MAX_NESTING + 1` workflows.
MAX_NESTING = 4


class ModelTables(Protocol):
    """What of a config names its models (`schema.Config` is one): the served models, the `[models]` table and the
    `passthrough` target — all that prefixed names and nesting are checked against, without the whole config."""

    @property
    def models(self) -> ModelsConfig: ...
    @property
    def served_models(self) -> Mapping[str, ServedModel]: ...
    @property
    def passthrough(self) -> Target | None: ...
    def served(self, model_id: str) -> ServedModel | None: ...


class ModelsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Model names beyond the served models: any workflow on any upstream model, named by a prefix (`critic-<model>`,
    `moa-<model>`, `self_consistency&critic-<model>`)."""

    technique_prefixes: bool = False
    """Serve `<workflow>-<model>` (a mode's name or alias, then the upstream's model name) and chains `a&b-<model>`;
    each stage calls `<model>` at `upstream`. A served model of that id wins."""
    upstream: str | None = None
    """The served model whose `api` target serves prefixed models (its URL, key, options, protocol, retries and
    timeouts, with the model named in the request); not set: the `passthrough` target."""
    request_limits: dict[str, Annotated[int, msgspec.Meta(ge=0)]] = {}
    """Caps on the settings a request for a prefixed model may choose, as a served model's `request_limits`."""


def composed(config: ModelTables, model_id: str) -> ServedModel | str | None:
    """The served model a composed id stands for; a reason when it looks composed but is not valid (its prefix names
    workflows, but cannot be served); None when it is no composed id at all."""
    models = config.models
    if not models.technique_prefixes:
        return None
    head, sep, model = model_id.partition("-")
    if not sep or not head or not model:
        return None
    names = head.split("&")
    table = registry.prefixes()
    if any(name not in table for name in names):
        return None  # a model of the upstream's own that has a `-` in it (`gpt-4.1`)
    modes = [table[name] for name in names]
    if len(modes) - 1 > MAX_NESTING:
        return f"a chain of at most {MAX_NESTING + 1} workflows is served, not {len(modes)}"
    for mode in modes[1:]:
        if not registry.get(mode).reviews_draft:
            drafting = ", ".join(name for name, w in registry.workflows().items() if w.reviews_draft)
            return f"{mode!r} reviews no draft, so it cannot follow `&` in a chain (these can: {drafting})"
    upstream = prefix_upstream(config)
    if upstream is None:
        return None  # refused at load: `technique_prefixes` needs an upstream
    api = msgspec.structs.replace(upstream, model=model, fallbacks=[])
    served = {DRAFT: f"{'&'.join(names[:-1])}-{model}"} if len(names) > 1 else {}
    return ServedModel(mode=modes[-1], api=api, served=served, request_limits=models.request_limits)


def prefix_upstream(config: ModelTables) -> Target | None:
    """The target prefixed models are called at: the `[models] upstream` served model's `api`, else `passthrough`."""
    name = config.models.upstream
    if name is None:
        return config.passthrough
    served = config.served_models.get(name)
    return None if served is None else served.api
