"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`mixture_of_agents`: layers of proposers, each layer answering at once and each later one shown the previous
layer's answers, then an aggregator writes the answer (Wang et al., 2024, "Mixture-of-Agents Enhances Large
Language Model Capabilities"; docs/guides/workflows.md).

Every proposer answers the conversation as the API model would — with the request's options (tools, format,
limits), then its own `options` (a temperature) — on its own target, else the API's. The first layer sees the
conversation alone; each later layer, and the aggregator (the `aggregator` target, else `api`), see the previous
layer's answers in the aggregate-and-synthesize prompt (`synthesis`). The aggregator's call is the client's answer,
streamed live to a streaming client.

A failed proposer is left out (the run is degraded). A later layer whose every proposer fails is passed over: the
next layer, or the aggregator, gets the answers of the layer before it. When the whole first layer fails, that is
the request's failure, as a first API call's is. A failed aggregator leaves the first answer of the last layer that
answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from ..core import Answer, Completion, FinalCall
from .base import PerRequest, RunContext, StageCall, StageFailed, Workflow
from .prompts import draft_as_text
from .synthesis import DEFAULT_SYNTHESIS_PROMPT, synthesis_messages


class Proposer(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One proposer of a mixture-of-agents layer: the target it calls and the options laid over its call."""

    target: dict[str, Any] | None = None
    """A target of its own (a target table, as `api`, or another served model: `{ served = "<id>" }`); not set: the
    `api` target."""
    options: dict[str, Any] = {}
    """A table laid over this proposer's call, after its target's and the request's options (e.g.
    `{ temperature = 0.9 }`)."""


# The paper samples its proposers at temperature 0.7; spread around it, three answers of one model differ.
DEFAULT_TEMPERATURES = (0.5, 0.7, 0.9)

Layer = Annotated[list[Proposer], msgspec.Meta(min_length=1, max_length=16)]


def default_layers() -> list[list[Proposer]]:
    """One layer of three proposers on the API target, at temperatures 0.5, 0.7 and 0.9."""
    return [[Proposer(options={"temperature": t}) for t in DEFAULT_TEMPERATURES]]


class ProposerOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, omit_defaults=True):
    """The sampling options a request may give a proposer: nothing else of a call's body (its model, its messages)."""

    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    seed: int | None = None


class RequestProposer(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True, omit_defaults=True):
    """A proposer as a request may give it (`x_adapter_critic.layers`): its sampling options, never a `target` —
    where a stage's call goes is the operator's (docs/guides/overrides.md)."""

    options: ProposerOptions = ProposerOptions()


# A layer as a request may give it: at most 6 proposers (16 from the config).
RequestLayer = Annotated[list[RequestProposer], msgspec.Meta(min_length=1, max_length=6)]


class MixtureOfAgentsSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # At most 3 layers of 6 from a request (4 of 16 from the config): each proposer is a call the operator pays for.
    layers: Annotated[list[Layer], msgspec.Meta(min_length=1, max_length=4), PerRequest(cap=3, items=RequestLayer)] = (
        msgspec.field(default_factory=default_layers)
    )
    """The proposer layers in order, each a list of proposers answering at once (at most 4 layers of 16); not set:
    one layer of three proposers on the `api` target at temperatures 0.5, 0.7 and 0.9."""
    synthesis_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the aggregate-and-synthesize instruction that later layers and the aggregator read before the
    numbered responses; not set: the built-in one."""


def proposer_stage(layer: int, index: int) -> str:
    """The stage (and stage-target key) of the `index`-th proposer of `layer`, both counted from 1."""
    return f"proposer:{layer}.{index}"


class MixtureOfAgents(Workflow):
    name = "mixture_of_agents"
    stages = ("proposer:<layer>.<i>", "aggregator")
    targets = ("aggregator",)
    Settings = MixtureOfAgentsSettings
    aliases = ("moa",)

    @classmethod
    def settings_targets(cls, settings: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
        layers = settings.get("layers")
        if not isinstance(layers, list):
            return {}
        return {
            proposer_stage(depth, i + 1): (f"layers[{depth - 1}][{i}].target", proposer["target"])
            for depth, layer in enumerate(layers, 1)
            if isinstance(layer, list)
            for i, proposer in enumerate(layer)
            if isinstance(proposer, Mapping) and proposer.get("target") is not None
        }

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: MixtureOfAgentsSettings = run.plan.settings
        instruction = settings.synthesis_prompt or DEFAULT_SYNTHESIS_PROMPT
        request, plan = run.request, run.plan
        raw = request.raw_messages
        answers: list[str] = []  # the answers of the last layer that answered
        layers: list[Any] = []
        errors: dict[str, str] = {}
        for depth, layer in enumerate(settings.layers, 1):
            # The first layer answers the conversation as sent; every later one is shown the answers before it.
            messages = (
                request.messages_json if depth == 1 else synthesis_messages(raw, request.messages, instruction, answers)
            )
            stages = [proposer_stage(depth, i) for i in range(1, len(layer) + 1)]
            calls = [StageCall(s, plan.target(s), messages, p.options) for s, p in zip(stages, layer, strict=True)]
            # The first layer is the run's first answer: its failing whole is the request's failure.
            results = await (run.api_calls(calls) if depth == 1 else run.review_calls(calls, api=True))
            texts = [draft_as_text(r.content, r.tool_calls) if isinstance(r, Completion) else None for r in results]
            layers.append(texts)
            run.note("layers", list(layers))
            errors.update((r.stage, r.reason) for r in results if isinstance(r, StageFailed))
            answered = [r for r in results if isinstance(r, Completion)]
            if answered:  # else passed over (every proposer failed): the next layer gets the earlier answers
                answers = [text for text in texts if text is not None]
                run.set_answer(Answer.of(answered[0]))
        if errors:
            run.note("proposer_errors", errors)
        final = synthesis_messages(raw, request.messages, instruction, answers)
        return run.final("aggregator", final, target=plan.target("aggregator"))
