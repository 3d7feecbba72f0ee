"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`panel`: an API draft, a panel of lenses reviewing it at once, a coordinator merging their critiques, then the
API model's second pass (docs/guides/workflows.md).

Each lens is a critic with a concern of its own (correctness, completeness, …) and, optionally, a target of its
own. The coordinator merges the critiques into one prioritised list (`coordinator = false`: they are put one
after another instead) and the second pass is the critic's, streamed live to a streaming client. A failed lens is
left out; when every lens fails the draft stands; a failed coordinator leaves the critiques one after another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from ..core import Completion, FinalCall
from .base import PerRequest, RunContext, StageCall, Workflow, first_draft
from .lenses import (
    DEFAULT_COORDINATOR_SYSTEM_PROMPT,
    DEFAULT_LENSES,
    Lens,
    RequestLens,
    concatenated,
    coordinator_messages,
    lens_messages,
)
from .prompts import draft_as_text, second_pass_messages


class PanelSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    # At most 8 lenses from a request (32 from the config): each is an upstream call the operator pays for.
    lenses: Annotated[list[Lens], msgspec.Meta(min_length=1, max_length=32), PerRequest(cap=8, items=RequestLens)] = (
        msgspec.field(default_factory=lambda: list(DEFAULT_LENSES))
    )
    """The panel's reviewers; not set: four for general chat (`correctness`, `completeness`, `instructions`,
    `clarity`)."""
    coordinator: Annotated[bool, PerRequest()] = True
    """`false`: no coordinator call; the second pass gets the lens critiques one after another."""
    coordinator_system_prompt: Annotated[str | None, PerRequest()] = None
    """Replaces the coordinator's system prompt; not set: the built-in one."""

    def __post_init__(self) -> None:
        names = [lens.name for lens in self.lenses]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"lens names must be unique; given more than once: {', '.join(twice)}")


def lens_role(name: str) -> str:
    """The stage-target key of a lens's own target (`lenses[i].target`)."""
    return f"lens:{name}"


class Panel(Workflow):
    name = "panel"
    stages = ("api_draft", "lens:<name>", "coordinator", "api_final")
    targets = ("critic", "coordinator")
    Settings = PanelSettings
    reviews_draft = True

    @classmethod
    def settings_targets(cls, settings: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
        lenses = settings.get("lenses")
        if not isinstance(lenses, list):
            return {}
        return {
            lens_role(str(lens.get("name"))): (f"lenses[{i}].target", lens["target"])
            for i, lens in enumerate(lenses)
            if isinstance(lens, Mapping) and lens.get("target") is not None
        }

    async def run(self, run: RunContext) -> FinalCall | None:
        settings: PanelSettings = run.plan.settings
        plan = run.plan
        draft = await first_draft(run)
        draft_text = draft_as_text(draft.content, draft.tool_calls)

        critic = plan.target("critic")
        calls = [
            StageCall(
                f"lens:{lens.name}",
                plan.targets.get(lens_role(lens.name), critic),
                lens_messages(lens, run.request.messages, draft_text),
            )
            for lens in settings.lenses
        ]
        results = await run.review_calls(calls)
        answered = list(zip(settings.lenses, results, strict=True))
        critiques = {lens.name: r.content or "" for lens, r in answered if isinstance(r, Completion)}
        errors = {lens.name: r.reason for lens, r in answered if not isinstance(r, Completion)}
        run.note("lenses", critiques)
        if errors:
            run.note("lens_errors", errors)
        if not critiques:
            return None  # every lens failed (degraded): the draft stands

        merged = concatenated(critiques)
        if settings.coordinator:
            prompt = settings.coordinator_system_prompt or DEFAULT_COORDINATOR_SYSTEM_PROMPT
            messages = coordinator_messages(prompt, run.request.messages, draft_text, critiques)
            coordinated = await run.review_call("coordinator", plan.targets.get("coordinator", critic), messages)
            if coordinated is not None:  # else degraded (`coordinator_error`): the critiques one after another
                merged = coordinated.content or ""
                run.note("coordinator", merged)
        second = second_pass_messages(run.request.raw_messages, draft_text, merged)
        return run.final("api_final", second)
