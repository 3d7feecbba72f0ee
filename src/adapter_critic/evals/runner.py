"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Running items and models through an endpoint with bounded concurrency, scoring each answer as it comes.

Jobs go item by item (every model on an item before the next item), so an interrupted run leaves pairs that
can be compared. Each finished job is handed to `on_result` at once (written, shown); a job cancelled mid-way
(Ctrl-C) leaves nothing, and `--resume` runs it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import anyio

from ..errors import UpstreamError
from .dataset import Item
from .endpoint import Endpoint
from .results import Key, Result
from .scorers import ScoreError, Scorer


def jobs(items: list[Item], models: list[str], done: set[Key]) -> list[tuple[Item, str]]:
    return [(item, model) for item in items for model in models if (item.id, model) not in done]


async def run_jobs(
    endpoint: Endpoint,
    todo: Iterable[tuple[Item, str]],
    scorer_of: Callable[[Item], Scorer],
    on_result: Callable[[Result], None],
    *,
    concurrency: int,
    cache: bool = False,
) -> None:
    pending = iter(todo)

    async def worker() -> None:
        for item, model in pending:  # one shared iterator: each job is taken once
            on_result(await run_one(endpoint, item, model, scorer_of(item), cache=cache))

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)


async def run_one(
    endpoint: Endpoint,
    item: Item,
    model: str,
    scorer: Scorer,
    *,
    cache: bool = False,
    settings: dict[str, Any] | None = None,
    label: str | None = None,
) -> Result:
    """Ask `model` about `item` and grade the answer; a failure is a result with `error`, never an exception.
    `cache`: the request asks to be answered from the exact-match cache (`x_adapter_critic.cache`), where its served
    model has one (docs/guides/cache.md). `settings`: the workflow's settings the request chooses
    (`x_adapter_critic`); `label`: what the result is filed under instead of `model` (a model with settings)."""
    base = Result(id=item.id, model=label or model, scorer=scorer.spec, metadata=item.metadata)
    body: dict[str, Any] = {**item.params, "model": model, "messages": item.messages}
    if settings:
        body["x_adapter_critic"] = {**_object(body.get("x_adapter_critic")), **settings}
    if cache:
        body["x_adapter_critic"] = {**_object(body.get("x_adapter_critic")), "cache": True}
    try:
        reply = await endpoint.chat(body)
    except UpstreamError as exc:
        base.error = endpoint.failure(exc)
        return base
    extension = _object(reply.body.get("adapter_critic"))
    tokens = _object(extension.get("tokens"))
    total = tokens.get("total") or reply.body.get("usage") or {}
    base.answer = reply.text
    base.latency_ms = round(reply.latency_ms, 3)
    base.run_id = extension.get("run_id") or reply.body.get("id")
    base.degraded = bool(extension.get("degraded"))
    base.cached_from = _object(extension.get("cache")).get("run_id")
    made_in = _object(extension.get("timings_ms")).get("total")
    if base.cached_from is not None and isinstance(made_in, int | float):
        base.latency_ms = made_in  # a hit's own time says nothing of the technique: the run that made the answer's
    base.usage = tokens.get("stages") or ({"total": total} if total else {})
    base.total_usage = total
    base.calls = upstream_calls(extension) if tokens.get("stages") else None
    cost = extension.get("cost")
    base.cost = cost if isinstance(cost, dict) else None
    try:
        base.score, base.note = await scorer.grade(base.answer, item)
    except ScoreError as exc:
        base.error = str(exc)
    except UpstreamError as exc:  # the judge's own request
        base.error = f"judge: {endpoint.failure(exc)}"
    return base


def upstream_calls(extension: dict[str, Any]) -> int:
    """How many upstream calls a run made: one a stage, or, for a stage run by another served model, its child
    runs' calls (the extension's `nested`)."""
    nested = _object(extension.get("nested"))
    calls = 0
    for stage in _object(_object(extension.get("tokens")).get("stages")):
        children = nested.get(stage)
        if isinstance(children, list) and children:
            calls += sum(upstream_calls(_object(child)) for child in children)
        else:
            calls += 1
    return calls


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class EndpointJudge:
    """The judge of `judge:MODEL` scorers: MODEL asked at temperature 0 through the endpoint the eval runs against.

    Scorers are built (and checked) before the endpoint opens; `bind` gives it the endpoint once it is open."""

    def __init__(self) -> None:
        self._endpoint: Endpoint | None = None

    def bind(self, endpoint: Endpoint) -> None:
        self._endpoint = endpoint

    async def __call__(self, model: str, messages: list[dict[str, Any]]) -> str:
        if self._endpoint is None:
            raise RuntimeError("EndpointJudge used before bind(endpoint)")
        reply = await self._endpoint.chat({"model": model, "messages": messages, "temperature": 0})
        return reply.text
