"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`CacheHit`: a request answered from the exact-match cache — a run of its own that calls no upstream.

Two records: the cached run's, rebuilt under the hit's run id (`entry.replay`), is what the client's protocol
renders; the hit's own, with no stages — so no tokens and a cost of 0 — is what its events carry to the subscribers:
the run store records it as a run linked to the one it came from (`cached_from`), the limits charge it nothing, the
metrics and traces count it as a run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..core import ChatRequest, Plan
from ..events import AnswerChunks, RunFinished, RunRecord, RunStarted, StageFinished, Subscriber
from ..pipeline.run import publisher
from ..pricing import PriceTable
from .entry import CachedRun, replay


class CacheHit:
    """One request's answer from the cache: `answer` (plain) or `execute` (a stream's run) publishes its events and
    gives the record to render."""

    def __init__(
        self,
        cached: CachedRun,
        plan: Plan,
        request: ChatRequest,
        run_id: str,
        subscribers: Sequence[Subscriber],
        prices: PriceTable | None,
    ) -> None:
        self.shown = replay(cached, run_id)
        self.record = RunRecord(
            run_id,
            plan.served_id,
            plan.mode,
            intermediate=self.shown.intermediate,
            answer=self.shown.answer,
            currency=None if prices is None else prices.currency,
            cached_from=cached.run_id,
        )
        self.stream = request.stream
        self._publish = publisher(self.record, subscribers)

    def answer(self) -> RunRecord:
        """Publish the hit's run (started and finished at once) and return the record the client's answer is."""
        record = self.record
        self._publish(
            RunStarted(record.run_id, record.served_model, record.mode, self.stream, cached_from=record.cached_from)
        )
        self._publish(RunFinished("ok", record))
        return self.shown

    async def execute(
        self,
        sink: Callable[[AnswerChunks], Awaitable[None]],
        progress: Callable[[StageFinished], Awaitable[None]] | None = None,
    ) -> RunRecord:
        """The hit as a stream's run (`http.stream.RunStreamer`): nothing is relayed, so the answer is streamed
        whole from the record, as an answer known whole is."""
        return self.answer()
