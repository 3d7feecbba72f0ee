"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `route fit` learns an `auto` model's policy from (docs/guides/routing.md): the observations of its candidates
in `tune` output directories, in the shadow evaluations and in the feedback of the run store (`routing.fit`).

A `tune` result counts for a candidate when the candidate is the prefixed name of its label over the tuned model
(`self_consistency-<model>` for the label `self_consistency`), or a served model that is that workflow on that model
at its defaults (`mode = "critic"`, `api.model = <model>`, nothing else). Its item's class is the one the router
would give the dataset item's messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..config import Config
from ..config.routing import Route
from ..evals.dataset import DatasetError, load_dataset
from ..evals.results import RESULTS, Result
from ..routing.features import request_class
from ..routing.fit import Observation
from ..store.records import StoredRequest
from ..tuning.report import PARETO
from .errors import CliError

if TYPE_CHECKING:
    from ..store.records import ShadowRow
    from ..store.routing import Scored

_result = msgspec.json.Decoder(Result)
_request = msgspec.json.Decoder(StoredRequest)


def from_tune(directory: Path, route: Route, config: Config) -> tuple[list[Observation], str | None]:
    """The observations in a `tune` output directory, and the currency of their costs (None: not priced)."""
    pareto, results = directory / PARETO, directory / RESULTS
    if not pareto.is_file() or not results.is_file():
        raise CliError(f"{directory}: not a tune output directory (no {PARETO} and {RESULTS} in it)")
    about = json.loads(pareto.read_text(encoding="utf-8"))
    upstream = str(about.get("upstream_model") or about.get("model"))
    try:
        items = {item.id: item for item in load_dataset(Path(about["dataset"]))}
    except (DatasetError, OSError, KeyError) as exc:
        raise CliError(f"{directory}: the dataset it tuned on cannot be read: {exc}") from None
    named = {label: candidate for candidate in route.candidates for label in _labels(candidate, upstream, config)}
    found: list[Observation] = []
    currency = None
    for line in results.read_bytes().splitlines():
        if not line.strip():
            continue
        result = _result.decode(line)
        candidate, item = named.get(result.model), items.get(result.id)
        if candidate is None or item is None:
            continue
        kind = request_class(item.messages, "tools" in item.params, route.classes)
        cost = None if result.cost is None else result.cost.get("total_known")
        currency = currency or (None if result.cost is None else result.cost.get("currency"))
        tokens = int(result.total_usage.get("total_tokens", 0))
        found.append(Observation(candidate, kind, result.value, tokens, cost, "tune"))
    return found, currency


def _labels(candidate: str, upstream: str, config: Config) -> list[str]:
    """The `tune` labels a result of which counts for `candidate`."""
    labels = []
    head, _, model = candidate.partition("-")
    if model == upstream:
        labels.append(head)
    served = config.served_models.get(candidate)
    if (
        served is not None and served.route is None and served.api is not None and served.api.model == upstream
        and not served.served and not served.targets and not served.settings
    ):  # fmt: skip
        labels.append(served.mode)
    return labels


def from_shadows(rows: Sequence[ShadowRow], route: Route, requests: Mapping[str, str]) -> list[Observation]:
    """Both sides of every shadow evaluation between two candidates that the judge decided, in the class the auto
    model gives the live request (from its stored messages; else the class noted when it was shadowed)."""
    found = []
    points = {"won": (0.0, 1.0), "tied": (0.5, 0.5), "lost": (1.0, 0.0)}
    for row in rows:
        live, shadow = row.detail.live, row.detail.shadow
        if row.outcome not in points or live.model not in route.candidates or shadow.model not in route.candidates:
            continue
        kind = _class_of(requests.get(row.live_run_id), route) or row.request_class or "unknown"
        mine, theirs = points[row.outcome]
        found.append(Observation(live.model, kind, mine, live.tokens, live.cost, "shadow"))
        found.append(Observation(shadow.model, kind, theirs, shadow.tokens, shadow.cost, "shadow"))
    return found


def _class_of(stored: str | None, route: Route) -> str | None:
    request = None if stored is None else _request.decode(stored)
    if request is None or request.messages is None:
        return None
    return request_class(request.messages, "tools" in request.options, route.classes)


def from_feedback(scored: Sequence[Scored], route: Route) -> list[Observation]:
    """Every run feedback scored whose request the store kept (capture `full`): its class is known."""
    found = []
    for entry in scored:
        kind = _class_of(entry.request, route)
        if kind is None:
            continue
        usage: Any = {} if entry.usage is None else json.loads(entry.usage)
        tokens = int(usage.get("total", {}).get("total_tokens", 0))
        found.append(Observation(entry.served_model, kind, (entry.score + 1) / 2, tokens, entry.cost, "feedback"))
    return found
