"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`best_of_n`: n candidate answers of the API model at once, then a judge picks one (docs/guides/workflows.md).

Judging is `pairwise` (a knockout: the leader so far meets each next candidate, every comparison asked in both
orders to cancel the judge's position bias; a split verdict is a tie, kept by the earlier candidate) or
`pointwise` (each candidate scored 0-10; the highest wins, ties to the earlier). An unparseable verdict is asked
once more, then counted as a tie (pointwise: no score, below any score). A failed candidate is left out; when all
fail, the request fails. A failed judge call ends the judging with the leader so far. The chosen candidate's
text, tool calls and finish reason are the answer (streamed to a streaming client as chunks once judged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from ..core import Completion, FinalCall, StageTarget
from ..errors import AdapterCriticError
from .base import PerRequest, RunContext, StageCall, StageFailed, Workflow
from .judging import (
    DEFAULT_PAIRWISE_SYSTEM_PROMPT,
    DEFAULT_POINTWISE_SYSTEM_PROMPT,
    pairwise_messages,
    parse_score,
    parse_vote,
    pointwise_messages,
    reason_of,
    retry_messages,
)
from .sampling import sample


class BestOfNSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # At most 8 candidates from a request (16 from the config); `candidate_options` stay the operator's: they are
    # laid over the call's body, `model` and `messages` included.
    n: Annotated[int, msgspec.Meta(ge=1, le=16), PerRequest(cap=8)] = 3
    """How many candidates the API target writes, at once."""
    judging: Annotated[Literal["pairwise", "pointwise"], PerRequest()] = "pairwise"
    """`"pairwise"`: a knockout, every comparison asked in both orders; `"pointwise"`: each candidate scored 0 to 10."""
    judge_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the judge's system prompt; not set: the built-in one for the `judging` chosen."""
    candidate_options: dict[str, Any] = {}
    """A table laid over each candidate call's body, after the API target's and the request's options (e.g.
    `{ temperature = 0.8 }`)."""


class _Stopped(AdapterCriticError):
    """A judge call failed (the run is degraded): the judging ends with the leader so far."""


class _Judge:
    """The judgments of one run: asks the judge (both orders at once, each unparseable reply once more)."""

    def __init__(self, run: RunContext, target: StageTarget, prompt: str, texts: list[str]) -> None:
        self.run, self.target, self.prompt, self.texts = run, target, prompt, texts
        self.judgments: list[dict[str, Any]] = []

    async def ask(self, asks: Sequence[list[dict[str, Any]]], pairwise: bool) -> list[str]:
        """The judge's replies to `asks` (made at once); those without a verdict asked once more, at once."""
        parse = parse_vote if pairwise else parse_score
        replies = await self._replies(asks)
        again = [i for i, reply in enumerate(replies) if parse(reply) is None]
        if again:
            retried = await self._replies([retry_messages(asks[i], replies[i], pairwise) for i in again])
            for i, reply in zip(again, retried, strict=True):
                replies[i] = reply
        return replies

    async def _replies(self, asks: Sequence[list[dict[str, Any]]]) -> list[str]:
        results = await self.run.review_calls([StageCall("judge", self.target, messages) for messages in asks])
        failed = [result for result in results if isinstance(result, StageFailed)]
        if failed:
            self.run.note("judge_error", failed[0].reason)
            raise _Stopped
        return [result.content or "" for result in results if isinstance(result, Completion)]

    async def knockout(self, alive: list[int]) -> int:
        """Pairwise: the leader meets each next candidate in both orders; it keeps its place unless both agree."""
        leader = alive[0]
        for challenger in alive[1:]:
            shown = [(leader, challenger), (challenger, leader)]  # who is reply A and who B, in each order
            asks = [pairwise_messages(self.prompt, self._conversation, self.texts[a], self.texts[b]) for a, b in shown]
            replies = await self.ask(asks, pairwise=True)
            votes = [_voted(parse_vote(reply), order) for reply, order in zip(replies, shown, strict=True)]
            won = votes[0] if votes[0] is not None and votes[0] == votes[1] else None
            self.judgments.append(
                {
                    "pair": [leader, challenger],
                    "votes": votes,
                    "winner": won if won is not None else leader,
                    "tie": won is None,
                    "reasons": [reason_of(reply) for reply in replies],
                }
            )
            leader = won if won is not None else leader
        return leader

    async def scores(self, alive: list[int]) -> int:
        """Pointwise: every candidate scored at once; the highest wins, ties (and no scores) to the earlier."""
        asks = [pointwise_messages(self.prompt, self._conversation, self.texts[i]) for i in alive]
        replies = await self.ask(asks, pairwise=False)
        scored = [(parse_score(reply), i, reply) for reply, i in zip(replies, alive, strict=True)]
        for score, i, reply in scored:
            self.judgments.append({"candidate": i, "score": score, "reason": reason_of(reply)})
        best = max(scored, key=lambda s: (s[0] if s[0] is not None else -1.0, -s[1]))
        return best[1]

    @property
    def _conversation(self) -> Any:
        return self.run.request.messages


def _voted(vote: str | None, shown: tuple[int, int]) -> int | None:
    """The candidate a vote names, given which was shown as A and which as B (None: a tie or no verdict)."""
    return shown[0] if vote == "A" else shown[1] if vote == "B" else None


class BestOfN(Workflow):
    name = "best_of_n"
    stages = ("candidate:<i>", "judge")
    targets = ("judge",)
    Settings = BestOfNSettings
    aliases = ("bon",)

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: BestOfNSettings = run.plan.settings
        # All failing is the request's failure.
        samples = await sample(
            run, "candidate", settings.n, settings.candidate_options, key="candidates", errors_key="candidate_errors"
        )
        alive = samples.alive
        chosen = alive[0]
        if len(alive) > 1:
            pairwise = settings.judging == "pairwise"
            default = DEFAULT_PAIRWISE_SYSTEM_PROMPT if pairwise else DEFAULT_POINTWISE_SYSTEM_PROMPT
            judge = _Judge(run, run.plan.target("judge"), settings.judge_system_prompt or default, samples.texts)
            try:
                chosen = await (judge.knockout(alive) if pairwise else judge.scores(alive))
            except _Stopped:
                chosen = _leader(judge.judgments, alive)
            run.note("judgments", judge.judgments)
        samples.choose(run, chosen)
        return None


def _leader(judgments: list[dict[str, Any]], alive: list[int]) -> int:
    """Who leads when the judging stopped: the last comparison's winner, else the first candidate."""
    winners = [judgment["winner"] for judgment in judgments if "winner" in judgment]
    return int(winners[-1]) if winners else alive[0]
