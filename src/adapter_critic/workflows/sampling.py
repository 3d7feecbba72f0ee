"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Samples of the API model taken at once, for the workflows that choose one answer among several (`best_of_n`,
`self_consistency`): the sample calls (each with its own seed), what came back (a failed sample left out and
noted), and the chosen sample made the answer. The run sends a chosen answer to a streaming client as chunks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..core import Answer, Completion
from .base import RunContext, StageCall, StageFailed
from .prompts import draft_as_text


@dataclass(frozen=True, slots=True)
class Samples:
    """What `n` samples gave, in order: each one's answer and text (None and "" for a failed one)."""

    answers: list[Answer | None]
    texts: list[str]

    @property
    def alive(self) -> list[int]:
        """The indices of the samples that answered."""
        return [i for i, answer in enumerate(self.answers) if answer is not None]

    def choose(self, run: RunContext, index: int) -> None:
        """Make sample `index` the run's answer (its text, tool calls and finish reason)."""
        chosen = self.answers[index]
        assert chosen is not None
        run.note("chosen", index)
        run.set_answer(chosen)


async def sample(
    run: RunContext, stage: str, n: int, options: Mapping[str, Any], *, key: str, errors_key: str
) -> Samples:
    """`n` calls to the API target at once (`<stage>:1` … `<stage>:n`), `options` laid over each; a `seed` (in
    `options`, else in the request) becomes `seed + i` for sample i, so that a seeded server does not answer n times
    the same. Their texts are noted under `key` (None for a failed one) and the failures under `errors_key`; when
    every call fails, that is the request's failure (`RunContext.api_calls`)."""
    seed = _seed(options, run.request.options)
    calls = [
        StageCall(
            f"{stage}:{i + 1}",
            run.plan.api,
            run.request.messages_json,
            options if seed is None else {**options, "seed": seed + i},
        )
        for i in range(n)
    ]
    results = await run.api_calls(calls)
    answers = [Answer.of(result) if isinstance(result, Completion) else None for result in results]
    errors = {result.stage: result.reason for result in results if isinstance(result, StageFailed)}
    return noted(run, answers, key=key, errors_key=errors_key, errors=errors)


def noted(
    run: RunContext, answers: list[Answer | None], *, key: str, errors_key: str, errors: dict[str, str]
) -> Samples:
    """The samples' texts noted under `key` (None for a failed one), their failures under `errors_key`."""
    texts = [draft_as_text(a.content, a.tool_calls) if a is not None else "" for a in answers]
    run.note(key, [text if a is not None else None for text, a in zip(texts, answers, strict=True)])
    if errors:
        run.note(errors_key, errors)
    return Samples(answers, texts)


def _seed(options: Mapping[str, Any], request_options: Mapping[str, Any]) -> int | None:
    """The sampling seed the samples would share (`options`', else the request's)."""
    seed = options.get("seed")
    if seed is None:
        seed = request_options.get("seed")
        if isinstance(seed, msgspec.Raw):
            try:
                seed = msgspec.json.decode(seed)
            except msgspec.DecodeError:
                return None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None
