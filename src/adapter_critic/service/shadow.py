"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Shadow evaluation on live traffic (docs/guides/routing.md#shadow-evaluation). For a sampled share of a served
model's live requests, once the live answer is complete, its shadow candidate answers the same request in the
background and the judge compares the two answers in both orders: the candidate `won` when both orders prefer it,
`lost` when both prefer the live answer, else `tied`; a failure of either is `failed`, recorded, never the client's.

Nothing of it touches the live answer: it starts after that answer's record is finished, runs in its own task, and
is dropped — not queued — when `concurrency` shadows already run or the window's budget is spent. Its runs are
recorded as children of the live run (`shadow`) and of the shadow run (`judge`), under the live run's key name (so
only that key and the operator see them), and what they spend counts against the shadow budget, not the key.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config.routing import Shadow
from ..core import ChatRequest
from ..events import RunRecord
from ..pipeline.nested import child_request
from ..routing.features import default_class, features_of, last_user_text
from ..store.records import ShadowDetail, ShadowOutcome, ShadowRow, Side
from ..workflows.judging import DEFAULT_PAIRWISE_SYSTEM_PROMPT, pairwise_messages, parse_vote
from .outcomes import RunStreamer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..observe.metrics import Metrics
    from ..pipeline.run import Run

logger = logging.getLogger("adapter_critic")

# A run of `model` on a request, made for a shadow: (model, request, run id, (parent run id, stage)) -> the run.
RunModel = Callable[[str, ChatRequest, str, tuple[str, str]], "Run"]


@dataclass(slots=True)
class _Window:
    started: float
    tokens: int = 0
    cost: float = 0.0


class Shadows:
    """The shadows of a config's served models: what runs now, and what each model's window has spent."""

    def __init__(
        self,
        shadows: dict[str, Shadow],
        *,
        engine_of: Callable[[], AsyncEngine | None],
        metrics: Metrics | None = None,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shadows = shadows
        self.engine_of = engine_of  # the run store's engine (None: not recording)
        self.metrics = metrics
        self._rng = rng
        self._clock = clock
        self.running: dict[str, int] = {}
        self._windows: dict[str, _Window] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def consider(
        self, served_id: str, request: ChatRequest, live: RunRecord, key_name: str | None, run_model: RunModel
    ) -> None:
        """Start a shadow of the live run `live` when its served model has one, the request is sampled and there is
        room and budget (else it is dropped, and counted)."""
        shadow = self.shadows.get(served_id)
        if shadow is None or live.status not in ("ok", "degraded") or not live.answer.content:
            return
        if self._rng() >= shadow.share:
            return
        if self.running.get(served_id, 0) >= shadow.concurrency:
            self._count(served_id, shadow.candidate, "dropped")
            return
        if self._over_budget(served_id, shadow):
            self._count(served_id, shadow.candidate, "over_budget")
            return
        self.running[served_id] = self.running.get(served_id, 0) + 1
        task = asyncio.get_running_loop().create_task(
            self._evaluate(served_id, shadow, request, live, key_name, run_model)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, grace: float) -> None:
        """Shutdown: let the shadows under way finish within `grace` seconds, then cancel the rest."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    def _window(self, served_id: str, shadow: Shadow) -> _Window:
        now = self._clock()
        window = self._windows.get(served_id)
        if window is None or now - window.started >= shadow.budget_window_seconds:
            window = self._windows[served_id] = _Window(now)
        return window

    def _over_budget(self, served_id: str, shadow: Shadow) -> bool:
        window = self._window(served_id, shadow)
        return (shadow.budget_tokens is not None and window.tokens >= shadow.budget_tokens) or (
            shadow.budget_cost is not None and window.cost >= shadow.budget_cost
        )

    def _count(self, served_id: str, candidate: str, outcome: str, detail: ShadowDetail | None = None) -> None:
        if self.metrics is None:
            return
        if detail is None:
            self.metrics.count_shadow(served_id, candidate, outcome)
            return
        tokens = detail.shadow.tokens + detail.judge.tokens
        cost = (detail.shadow.cost or 0.0) + (detail.judge.cost or 0.0)
        currency = detail.currency
        self.metrics.count_shadow(served_id, candidate, outcome, tokens, None if currency is None else (currency, cost))

    async def _evaluate(
        self,
        served_id: str,
        shadow: Shadow,
        request: ChatRequest,
        live: RunRecord,
        key_name: str | None,
        run_model: RunModel,
    ) -> None:
        route = live.intermediate.get("route")
        routed = route.get("candidate") if isinstance(route, dict) else None
        detail = ShadowDetail(
            live=_side(routed or live.served_model, live), shadow=Side(model=shadow.candidate),
            judge=Side(model=shadow.judge), currency=live.currency,
        )  # fmt: skip
        shadow_run_id = f"{live.run_id}.shadow"
        outcome: ShadowOutcome = "failed"
        try:
            outcome = await self._compare(shadow, request, live, run_model, shadow_run_id, detail)
        except asyncio.CancelledError:
            detail.error = "cancelled: the server shut down"
            raise
        except Exception as exc:  # an APIError of either side, or anything else: recorded, never the client's
            detail.error = str(exc)[:500] or type(exc).__name__
            logger.warning("shadow %s of run %s failed: %s", shadow.candidate, live.run_id, detail.error)
        finally:
            self.running[served_id] -= 1
            window = self._window(served_id, shadow)
            window.tokens += detail.shadow.tokens + detail.judge.tokens
            window.cost += (detail.shadow.cost or 0.0) + (detail.judge.cost or 0.0)
            self._count(served_id, shadow.candidate, outcome, detail)
            row = ShadowRow(
                shadow_run_id=shadow_run_id, live_run_id=live.run_id, served_model=served_id,
                candidate=shadow.candidate, created_at=self._clock(), key_name=key_name,
                request_class=_request_class(live, request), outcome=outcome, detail=detail,
            )  # fmt: skip
            await self._write(row)

    async def _compare(
        self,
        shadow: Shadow,
        request: ChatRequest,
        live: RunRecord,
        run_model: RunModel,
        shadow_run_id: str,
        detail: ShadowDetail,
    ) -> ShadowOutcome:
        asked = child_request(shadow.candidate, request.messages_json, request.options)
        record = await _spent(
            run_model(shadow.candidate, asked, shadow_run_id, (live.run_id, "shadow")), detail, "shadow"
        )
        answer = record.answer.content or ""
        mine = live.answer.content or ""
        votes: list[str | None] = []
        orders = ((mine, answer, ("live", "shadow")), (answer, mine, ("shadow", "live")))
        for number, (first, second, names) in enumerate(orders):
            messages = pairwise_messages(DEFAULT_PAIRWISE_SYSTEM_PROMPT, request.messages, first, second)
            judge_id = f"{shadow_run_id}.judge{number}"
            asked = child_request(shadow.judge, messages, {})
            detail.judge_runs.append(judge_id)
            judged = await _spent(
                run_model(shadow.judge, asked, judge_id, (shadow_run_id, "shadow judge")), detail, "judge"
            )
            vote = parse_vote(judged.answer.content or "")
            votes.append(None if vote is None else "tie" if vote == "tie" else names[0] if vote == "A" else names[1])
        detail.votes = votes
        if votes == ["shadow", "shadow"]:
            return "won"
        if votes == ["live", "live"]:
            return "lost"
        return "tied"

    async def _write(self, row: ShadowRow) -> None:
        engine = self.engine_of()
        if engine is None:
            return
        from ..store.routing import add_shadow

        try:
            await add_shadow(engine, row)
        except Exception as exc:  # the database driver's own errors: the outcome is still counted
            logger.warning("shadow of run %s not recorded: %s", row.live_run_id, exc)


def then(execute: RunStreamer, after: Callable[[RunRecord], None]) -> RunStreamer:
    """A streamed run that calls `after` with its record once it is complete (its answer all sent)."""

    async def run(sink: Any, progress: Any) -> RunRecord:
        record = await execute(sink, progress)
        after(record)
        return record

    return run


async def _spent(run: Run, detail: ShadowDetail, side: str) -> RunRecord:
    """Run `run` and count what it spent on `detail`'s `side` (`shadow`, or `judge`: added up), whether it answered
    or failed (a failed call's tokens are spent too)."""
    try:
        return await run.execute()
    finally:
        if side == "shadow":
            detail.shadow = _side(detail.shadow.model, run.record)
        else:
            detail.judge = _added(detail.judge, run.record)


def _side(model: str, record: RunRecord) -> Side:
    cost = record.cost()
    return Side(
        model=model, run_id=record.run_id, tokens=record.total_usage().total_tokens,
        cost=None if cost is None else cost.total_known, ms=round(record.elapsed_ms(), 3),
    )  # fmt: skip


def _added(judge: Side, record: RunRecord) -> Side:
    cost = record.cost()
    known = None if cost is None else (judge.cost or 0.0) + cost.total_known
    return Side(model=judge.model, tokens=judge.tokens + record.total_usage().total_tokens, cost=known,
                ms=(judge.ms or 0.0) + round(record.elapsed_ms(), 3))  # fmt: skip


def _request_class(live: RunRecord, request: ChatRequest) -> str:
    """The class an `auto` model gave the request, else the one its features make (`routing.features`)."""
    route = live.intermediate.get("route")
    if isinstance(route, dict) and isinstance(route.get("class"), str):
        return str(route["class"])
    text = last_user_text(request.messages)
    return default_class(features_of(text, "tools" in request.options))
