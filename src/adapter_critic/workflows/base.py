"""What a workflow is: the `Workflow` base class a mode plug-in subclasses, and the `RunContext` it runs in.

A workflow owns one mode: its stage names, the config keys of its stage targets and settings, how it runs,
which call's answer is the client's, and what a reviewer failure leaves standing. The run that drives it
(`pipeline.run.Run`) owns everything a workflow should not have to know: retries and fallbacks, deadlines,
events, degrading to the answer so far, and whether the final answer is streamed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import msgspec

from ..core import Answer, ChatRequest, Completion, FinalCall, Plan, StageTarget
from ..events import Value
from .prompts import render_tool_calls
from .settings import PerRequest, request_settings

__all__ = ["NoSettings", "PerRequest", "RunContext", "StageCall", "StageFailed", "Workflow"]


class NoSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A workflow without settings of its own."""


@dataclass(frozen=True, slots=True)
class StageCall:
    """One of several stage calls made at once (`RunContext.review_calls`, `RunContext.api_calls`).

    `options` (a workflow's own, e.g. a sampling temperature) are laid over everything else the call is sent."""

    stage: str
    target: StageTarget
    messages: Any
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StageFailed:
    """A stage call of several that failed and was left out (the run is degraded); `reason` says why."""

    stage: str
    reason: str


class RunContext(Protocol):
    """What a workflow sees of its run."""

    request: ChatRequest
    plan: Plan

    @property
    def answer(self) -> Answer:
        """The answer so far: what the client gets if a later stage fails and the run degrades."""
        ...

    def set_answer(self, answer: Answer) -> None:
        """Make `answer` the answer so far."""

    async def first_call(self, stage: str, messages: Any) -> Completion:
        """The first API call (the request's options laid over the API target's); its failure is the request's
        failure, an upstream 4xx relayed as is."""
        ...

    async def review_call(
        self, stage: str, target: StageTarget, messages: Any, *, api: bool = False
    ) -> Completion | None:
        """A later call to `target` with only its own options (`api=True`: with the request's, like an API
        call); None when it failed and the run degraded to the answer so far."""
        ...

    async def review_calls(self, calls: Sequence[StageCall], *, api: bool = False) -> list[Completion | StageFailed]:
        """Several reviewer calls at once (each like `review_call`, within the run's cap on concurrent upstream
        calls), in the order given (`api=True`: each with the request's options, like an API call). A failed one
        is a `StageFailed` and the run is degraded, or, with `on_review_error = "fail"`, it fails the request and
        the others are cancelled; unlike `api_calls`, every one failing is not the request's failure."""
        ...

    async def api_calls(self, calls: Sequence[StageCall]) -> list[Completion | StageFailed]:
        """Several API calls at once (the request's options, then the call's own), in the order given. A failed
        one is a `StageFailed` and the run is degraded (`on_review_error = "fail"`: the request fails); when
        every one fails, the first one's failure is the request's, as for `first_call`."""
        ...

    def final(self, stage: str, messages: Any, *, first: bool = False, target: StageTarget | None = None) -> FinalCall:
        """The API call whose answer is the client's, made by the run (streamed live when the client streams);
        `first` when it is also the run's first call. `target`: another target than the API's (an aggregator), sent
        the request's options all the same."""
        ...

    def note(self, key: str, value: Value) -> None:
        """Report `value` under `key` in the extension's `intermediate` (text, or JSON data)."""


class Workflow:
    """Base class of a workflow plug-in, registered under the entry-point group `adapter_critic.workflows`.

    Class attributes:
        name: the mode, as `mode = "…"` in the config and in a request override.
        stages: the stage names it reports (documentation; `tokens.stages` lists those that ran).
        targets: served-model config keys that name a stage target besides `api` (e.g. `critic`); a key
            that is not configured falls back to the `api` target. A request overrides each with
            `x_adapter_critic.<key>_model` / `<key>_base_url` (URLs within the server's allowlist).
        Settings: a msgspec Struct of the served-model keys it reads (prompts, limits); validated at load,
            its defaults used where a key is absent. A field marked `PerRequest` in its `Annotated[...]` is one a
            request may choose too (`x_adapter_critic.<key>`), typed as in `Settings` or stricter (`cap`, `items`,
            `pattern`); none by default: a setting is the operator's unless the workflow says a caller may choose it.
        RequestSettings: the Struct of the settings a request may choose, each a key of `Settings` defaulting to
            None (a key the request does not give keeps the served model's value); derived from the `PerRequest`
            marks of `Settings` (`workflows.settings.request_settings`). A workflow whose `Settings` marks none may
            still give one of its own.
        final_key: the `intermediate` key that holds the client's answer.
        many_choices: whether it answers a request's `n > 1` with that many choices (only `direct` relays them
            all); a workflow that answers with one refuses `n > 1` with a 400 rather than dropping choices.
        reviews_draft: whether its first API call (`RunContext.first_call`) writes a draft its later stages review.
            Only such a workflow may have a `draft` stage target, and come second in a chain (`a&b-model`): its
            draft is then the first workflow's answer (docs/guides/workflows.md, "Composing workflows").
        aliases: other names a model-name prefix may give it (`moa` for `mixture_of_agents`), besides `name`.
    """

    name: ClassVar[str]
    stages: ClassVar[tuple[str, ...]] = ()
    targets: ClassVar[tuple[str, ...]] = ()
    Settings: ClassVar[type[msgspec.Struct]] = NoSettings
    RequestSettings: ClassVar[type[msgspec.Struct]] = NoSettings
    final_key: ClassVar[str] = "final"
    many_choices: ClassVar[bool] = False
    reviews_draft: ClassVar[bool] = False
    aliases: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Settings" not in cls.__dict__:
            return
        try:
            derived = request_settings(cls.Settings)
        except NameError:  # its annotations do not resolve here: a workflow's own `RequestSettings` still does
            if "RequestSettings" in cls.__dict__:
                return
            raise
        if not derived.__struct_fields__:
            if "RequestSettings" not in cls.__dict__:
                cls.RequestSettings = NoSettings
            return
        if "RequestSettings" in cls.__dict__:
            raise TypeError(
                f"{cls.__qualname__}: give the settings a request may choose either as PerRequest marks of "
                "`Settings` or as `RequestSettings`, not both"
            )
        cls.RequestSettings = derived

    @classmethod
    def settings_targets(cls, settings: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
        """Stage targets given inside the served model's settings (a panel lens's own `target`): each as its
        stage-target key, its key path below the served model (for messages) and its table as given."""
        return {}

    async def run(self, run: RunContext) -> FinalCall | None:
        """Run the stages before the last call and return that call, or None when the answer is already known
        (`run.answer`)."""
        raise NotImplementedError


async def first_draft(run: RunContext, stage: str = "api_draft", key: str = "api_draft") -> Completion:
    """The opening of a workflow that reviews a draft: the first API call (`stage`), its answer made the answer so
    far (what a failed review leaves standing) and reported under `key` (`note_draft`)."""
    draft = await run.first_call(stage, run.request.messages_json)
    run.set_answer(Answer.of(draft))
    note_draft(run, draft, key)
    return draft


def note_draft(run: RunContext, draft: Completion, key: str = "api_draft") -> None:
    """Report a draft (under `key`, `api_draft` by default) and its tool calls as JSON (`<key>_tool_calls`)."""
    run.note(key, draft.content or "")
    rendered = render_tool_calls(draft.tool_calls)
    if rendered:
        run.note(f"{key}_tool_calls", rendered)
