"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `tune` tries: every registered workflow (plug-ins included) with a small grid of its settings, and chains of
two (`a&b`, `b` reviewing `a`'s answer) at their defaults; `direct` is the baseline.

The grid comes from each workflow's own declaration of what a request may set (`PerRequest` marks, issue 44's one
declaration): a whole number is tried at its default and at half of it (or one more, when halving leaves it as it
is), within the request's cap; a number with a fraction (a temperature) at its default and half of it; a switch
both ways. Texts, lists and choices between words (prompts, lenses, layers) keep the operator's values: a grid over
them would be the user's own ideas, not the workflow's. At most `GRID` settings combinations per workflow, from its
first tunable settings in declaration order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import msgspec
import msgspec.inspect

from ..workflows import registry
from ..workflows.settings import PerRequest

BASELINE = "direct"
GRID = 4  # settings combinations per workflow, at most


@dataclass(frozen=True)
class Candidate:
    """One technique to measure: a workflow, or a chain of two (`modes`), with the settings a request gives it."""

    modes: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def workflow(self) -> str:
        """As a model-name prefix: `critic`, `best_of_n&critic`."""
        return "&".join(self.modes)

    @property
    def label(self) -> str:
        """Unique and readable: `self_consistency n=3 temperature=0.35`; the key of its results."""
        said = " ".join(f"{name}={_said(value)}" for name, value in sorted(self.settings.items()))
        return f"{self.workflow} {said}".strip()

    def model(self, upstream_model: str) -> str:
        """The model name a request for it gives: the prefixed name over the model being tuned."""
        return f"{self.workflow}-{upstream_model}"


def _said(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def candidates(techniques: Iterable[str] | None = None, *, chains: bool = True) -> list[Candidate]:
    """Every candidate, the baseline first; `techniques` (workflow names, aliases or `a&b` chains) keeps only those
    (and the baseline). Raises ValueError naming a technique that is no workflow or no valid chain."""
    workflows = registry.workflows()
    if techniques is not None:
        found = [_chain(name) for name in techniques]
        wanted = [modes for modes in found if modes != (BASELINE,)]
        chosen: list[Candidate] = [Candidate((BASELINE,))]
        for modes in dict.fromkeys(wanted):
            chosen += grid(modes) if len(modes) == 1 else [Candidate(modes)]
        return chosen
    every = [Candidate((BASELINE,))]
    for name in workflows:
        if name != BASELINE:
            every += grid((name,))
    if chains:
        reviewers = [name for name, workflow in workflows.items() if workflow.reviews_draft]
        every += [
            Candidate((first, second)) for first in workflows for second in reviewers if first not in (BASELINE, second)
        ]
    return every


def _chain(name: str) -> tuple[str, ...]:
    table = registry.prefixes()
    parts = [part.strip() for part in name.split("&")]
    unknown = [part for part in parts if part not in table]
    if unknown or not parts:
        known = ", ".join(registry.names())
        raise ValueError(f"--techniques: {', '.join(unknown) or repr(name)} is not a workflow (these are: {known})")
    modes = tuple(table[part] for part in parts)
    if len(modes) > 2:
        raise ValueError(f"--techniques: {name!r}: tune tries chains of two workflows, not {len(modes)}")
    if len(modes) == 2 and not registry.get(modes[1]).reviews_draft:
        drafting = ", ".join(n for n, w in registry.workflows().items() if w.reviews_draft)
        raise ValueError(f"--techniques: {name!r}: {modes[1]} reviews no draft (these can follow `&`: {drafting})")
    return modes


def grid(modes: tuple[str, ...]) -> list[Candidate]:
    """The workflow at its defaults, then its settings grid (see the module's docstring)."""
    axes = tunable(registry.get(modes[-1]).Settings)[:2]
    found: list[Candidate] = []
    for combination in itertools.product(*(values for _, values in axes)):
        # each axis lists its default first: a setting left at it is not sent
        chosen = {name: value for (name, values), value in zip(axes, combination, strict=True) if value != values[0]}
        found.append(Candidate(modes, chosen))
    found.sort(key=lambda candidate: len(candidate.settings))  # the defaults first
    return found[:GRID]


def tunable(settings: type[msgspec.Struct]) -> list[tuple[str, list[Any]]]:
    """The settings of `settings` a request may set that have a grid, each with its values (the default first)."""
    hints = get_type_hints(settings, include_extras=True)
    found: list[tuple[str, list[Any]]] = []
    for f in msgspec.structs.fields(settings):
        marks = [m for m in getattr(hints[f.name], "__metadata__", ()) if isinstance(m, PerRequest)]
        if not marks or f.default is msgspec.NODEFAULT:
            continue
        values = _values(msgspec.inspect.type_info(f.type), f.default, marks[0].cap)
        if values is not None and len(values) > 1:
            found.append((f.name, values))
    return found


def _values(info: msgspec.inspect.Type, default: Any, cap: int | None) -> list[Any] | None:
    if isinstance(info, msgspec.inspect.Metadata):
        return _values(info.type, default, cap)
    if isinstance(info, msgspec.inspect.BoolType):
        return [default, not default]
    if isinstance(info, msgspec.inspect.IntType) and isinstance(default, int):
        low = info.ge if info.ge is not None else 0
        high = min(x for x in (info.le, cap) if x is not None) if (info.le, cap) != (None, None) else default + 1
        half = math.ceil(default / 2)
        other = half if low <= half < default else default + 1  # one more when halving leaves it as it is
        return [default, other] if low <= other <= high and other != default else [default]
    if isinstance(info, msgspec.inspect.FloatType) and isinstance(default, float) and default > 0:
        return [default, round(default / 2, 2)]
    return None
