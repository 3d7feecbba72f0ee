"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The gate a new version of lessons passes before runs use it: the served model answers the held-out items twice in
process — with the lessons active now (or none), then with the new version — and the new version may become active
only when it is not worse: its mean score, item by item against the active one's, is at least as high. What the
check found (both means, wins, ties and losses, the paired interval and the sign test's p-value) is kept with the
version.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import anyio

from ..evals.dataset import Item
from ..evals.endpoint import InProcess
from ..evals.results import Result
from ..evals.runner import run_one
from ..evals.scorers import Scorer
from ..evals.stats import mean, paired


async def answers(
    endpoint: InProcess,
    served_id: str,
    version: int | None,
    items: Sequence[Item],
    scorer_of: Callable[[Item], Scorer],
    concurrency: int,
) -> list[Result]:
    """Each item answered by `served_id` with lessons `version` (None: none), in the items' order."""
    chat = endpoint.service.chat
    chat.lessons_pinned[served_id] = version
    found: list[Result | None] = [None] * len(items)
    pending = iter(enumerate(items))

    async def worker() -> None:
        for number, item in pending:
            found[number] = await run_one(endpoint, item, served_id, scorer_of(item))

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
    finally:
        chat.lessons_pinned.pop(served_id, None)
    return [result for result in found if result is not None]


def verdict(current: list[Result], candidate: list[Result], versions: tuple[int | None, int]) -> dict[str, Any]:
    """What the check found, and `not_worse`: whether the candidate may become active."""
    before, after = [r.value for r in current], [r.value for r in candidate]
    comparison = paired(after, before)
    errors = sum(1 for r in (*current, *candidate) if r.error is not None)
    return {
        "items": len(after),
        "against": versions[0],
        "version": versions[1],
        "score_before": mean(before) if before else None,
        "score_after": mean(after) if after else None,
        **{k: v for k, v in asdict(comparison).items() if k != "items"},
        "ci": list(comparison.ci),
        "errors": errors,
        "not_worse": bool(after) and comparison.mean_difference >= 0,
    }
