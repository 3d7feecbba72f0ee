"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`self_consistency` (Wang et al., 2022, "Self-Consistency Improves Chain of Thought Reasoning in Language Models"):
`n` samples of the API model at once, the final answer of each extracted (`voting`), and the majority answer
returned with its whole reasoning — the first sample that gave it; a tie goes to the answer given first. When no
sample has an answer to extract, *universal* self-consistency (Chen et al., 2023, "Universal Self-Consistency for
Large Language Model Generation"): the API model is shown the samples and asked which is the most consistent with
the others (an unreadable reply, or a failed call, leaves the first sample). A failed sample is left out; when all
fail, the request fails. The chosen sample is the answer (streamed to a streaming client as chunks once chosen).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any, Literal

import msgspec

from ..core import Answer, Completion, FinalCall, Message
from .base import PerRequest, RunContext, StageCall, Workflow
from .prompts import reviewer_messages, shown_conversation, tagged
from .sampling import Samples, noted, sample
from .voting import extractor, tally

DEFAULT_CONSISTENCY_SYSTEM_PROMPT = """\
You are shown a conversation and several responses that an AI assistant sampled for its last message. Evaluate \
the responses and select the most consistent response based on majority consensus: the one whose final answer and \
reasoning agree most with the others.

Start your answer with "The most consistent response is Response X" (without quotes), X being that response's \
number.\
"""

# Each has one bounded run of separators between its parts, so that reading a long reply stays linear in its length.
_MOST_CONSISTENT = re.compile(
    r"most\s{1,3}consistent(?:\s{1,3}(?:response|one|answer))?(?:\s{1,3}is)?[\s:*_`\"'#]{0,8}"
    r"(?:response[\s#*_`]{0,4})?(\d{1,3})\b",
    re.IGNORECASE,
)
_RESPONSE = re.compile(r"response[\s#*_`]{0,4}(\d{1,3})\b", re.IGNORECASE)
_BARE = re.compile(r"[\s*_`\"'#(\[]{0,8}(?:response[\s#]{0,2})?(\d{1,3})[\s*_`\"'.)\]]{0,8}", re.IGNORECASE)
# What a request may ask for: every extractor but `regex:` (a caller's pattern could take a core for seconds).
_REQUEST_EXTRACT = r"^(?:last_number|boxed|choice|json:[^.\s]+(?:\.[^.\s]+)*)$"


class SelfConsistencySettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # At most 8 samples from a request (16 from the config): each is an upstream call the operator pays for.
    n: Annotated[int, msgspec.Meta(ge=1, le=16), PerRequest(cap=8)] = 5
    """How many samples the API target writes, at once."""
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2), PerRequest()] = 0.7
    """The samples' temperature (over the request's own: samples must differ to vote)."""
    seed: int | None = None
    """A sampling seed: sample i gets `seed + i` (the request's `seed` does the same when this is not set)."""
    extract: Annotated[
        str, msgspec.Meta(min_length=1, max_length=1000), PerRequest(cap=200, pattern=_REQUEST_EXTRACT)
    ] = "last_number"
    """How a sample's final answer is read: `last_number`, `boxed` (`\\boxed{…}`), `choice` (a letter A to E),
    `regex:PATTERN` (the last match: its first group, or the whole match) or `json:PATH` (a dot path into the JSON
    answer, as `json:answer` or `json:items.0.name`)."""
    sampling: Annotated[Literal["parallel", "n"], PerRequest()] = "parallel"
    """`"parallel"`: n calls at once (every upstream); `"n"`: one call asking for `n` choices (read the prompt once; the
    upstream must honour `n`, as OpenAI and vLLM do)."""
    consistency_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the prompt that asks which sample is the most consistent (when no sample has an answer to extract)."""

    def __post_init__(self) -> None:
        extractor(self.extract)  # an ExtractError (a ValueError) names what is wrong


class SelfConsistency(Workflow):
    name = "self_consistency"
    stages = ("sample:<i>", "consistency")
    Settings = SelfConsistencySettings

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: SelfConsistencySettings = run.plan.settings
        samples = await _samples(run, settings)  # all failing is the request's failure
        extract = extractor(settings.extract)
        answers = [extract(a.content or "") if a is not None else None for a in samples.answers]
        run.note("answers", answers)
        vote = tally(answers)
        run.note("votes", vote.votes)
        if vote.chosen is not None:
            chosen, chosen_by = vote.chosen, "tie" if vote.tie else "majority"
        else:
            chosen, chosen_by = await _most_consistent(run, settings, samples)
        run.note("chosen_by", chosen_by)
        samples.choose(run, chosen)
        return None


async def _samples(run: RunContext, settings: SelfConsistencySettings) -> Samples:
    options: dict[str, Any] = {"temperature": settings.temperature}
    if settings.seed is not None:
        options["seed"] = settings.seed
    if settings.sampling == "parallel":
        return await sample(run, "sample", settings.n, options, key="samples", errors_key="sample_errors")
    call = StageCall("samples", run.plan.api, run.request.messages_json, {**options, "n": settings.n})
    [completion] = await run.api_calls([call])  # its failure is the request's
    assert isinstance(completion, Completion)
    first = Answer.of(completion)
    # The source holds every choice: the chosen one is answered whole instead of relaying it.
    answers: list[Answer | None] = [dataclasses.replace(first, more=(), source=None), *first.more]
    return noted(run, answers, key="samples", errors_key="sample_errors", errors={})


async def _most_consistent(run: RunContext, settings: SelfConsistencySettings, samples: Samples) -> tuple[int, str]:
    """Universal self-consistency: the sample the API model finds most consistent with the others, and how it was
    chosen (`universal`, or `first` when there was nothing to compare or no usable pick)."""
    alive = samples.alive
    if len(alive) < 2:
        return alive[0], "first"
    prompt = settings.consistency_system_prompt or DEFAULT_CONSISTENCY_SYSTEM_PROMPT
    messages = consistency_messages(prompt, run.request.messages, [samples.texts[i] for i in alive])
    reply = await run.review_call("consistency", run.plan.api, messages)
    if reply is None:
        return alive[0], "first"  # degraded (`consistency_error`)
    run.note("consistency", reply.content or "")
    picked = parse_pick(reply.content or "", len(alive))
    return (alive[picked], "universal") if picked is not None else (alive[0], "first")


def consistency_messages(system_prompt: str, messages: list[Message], responses: list[str]) -> list[dict[str, Any]]:
    """The question universal self-consistency asks: the conversation, then the responses numbered from 1."""
    return reviewer_messages(
        system_prompt,
        shown_conversation(messages),
        *(tagged(f"response_{i}", f"Response {i}:\n{text}") for i, text in enumerate(responses, 1)),
        'Which response is the most consistent with the others? Start with "The most consistent response is '
        'Response X".',
    )


def parse_pick(reply: str, count: int) -> int | None:
    """The response a consistency reply picks, as an index from 0 (None: none of 1..count is read from it). Read
    tolerantly: the first "most consistent response is Response X" in any case and markup, else the one response
    the reply names, else a reply that is only the number."""
    said = _MOST_CONSISTENT.search(reply)
    if said is not None:
        number = int(said.group(1))
    else:
        named = set(_RESPONSE.findall(reply))
        bare = _BARE.fullmatch(reply)
        if len(named) == 1:
            number = int(named.pop())
        elif bare is not None:
            number = int(bare.group(1))
        else:
            return None
    return number - 1 if 1 <= number <= count else None
