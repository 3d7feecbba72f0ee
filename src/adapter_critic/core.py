"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The plain data every layer shares: a request's messages, a stage target and a plan, an upstream
completion, usage, and the answer a run gives.

Nothing here does I/O or knows about HTTP; it is the ground floor the other packages stand on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from .redact import redact_userinfo

Role = Literal["system", "developer", "user", "assistant", "tool"]
# The stage-target key of a draft written elsewhere (`Plan.draft`): another served model, in a chain `a&b-<model>`.
DRAFT = "draft"


class Message(msgspec.Struct, kw_only=True, gc=False):
    """The fields of a request message the workflows read; unknown fields stay in the raw form."""

    role: Role
    content: str | list[Any] | None = None
    tool_calls: list[Any] | None = None


@dataclass(slots=True)
class ChatRequest:
    """A validated chat request: what the workflows read, plus every other field as raw JSON to forward."""

    model: str
    messages: list[Message]
    # The `messages` array exactly as sent: forwarded whole, so its unknown fields survive byte for byte.
    messages_json: msgspec.Raw
    options: dict[str, Any] = field(default_factory=dict)
    overrides: Any = None  # `request.decode.Overrides` when the request carries `x_adapter_critic`
    # Where the overrides came from, for error messages: `x_adapter_critic` or `extra_body.x_adapter_critic`.
    overrides_param: str = "x_adapter_critic"
    stream: bool = False
    include_usage: bool = False
    # `messages_json` split into its messages when it was decoded (`split_deep_messages`), else None.
    split: list[msgspec.Raw] | None = None

    @property
    def raw_messages(self) -> list[msgspec.Raw]:
        """Each message exactly as sent (for a second pass, which appends two): a new list each time."""
        if self.split is not None:
            return list(self.split)
        return _raw_list_decoder.decode(self.messages_json)

    def split_deep_messages(self) -> None:
        """Split `messages_json` into its messages now, where the request is decoded, when it could nest deep enough
        for splitting it deeper in the stack (a workflow's later stage) to pass the interpreter's recursion limit:
        it is then refused (or split) once, at decode time. Raises `RecursionError` as decoding does."""
        raw = self.messages_json
        if len(raw) < _SPLIT_EARLY_AT:
            return
        data = bytes(raw)
        if data.count(b"[") + data.count(b"{") >= _SPLIT_EARLY_AT:
            self.split = _raw_list_decoder.decode(raw)


_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
# Openers (`[`, `{`) from which messages are split at decode time: fewer cannot nest deep enough to matter.
_SPLIT_EARLY_AT = 256


class Usage(msgspec.Struct):
    """Token counts of one call, one stage or a whole run, with the details the upstream gave (cached,
    reasoning, audio… tokens), summed per key; details nobody reported are left out, never `null`."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    completion_tokens_details: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET

    def add(self, other: Usage | None) -> None:
        """Count `other` in (an upstream that reported no usage counts zeros)."""
        if other is not None:
            self.prompt_tokens += other.prompt_tokens
            self.completion_tokens += other.completion_tokens
            self.total_tokens += other.total_tokens
            if other.prompt_tokens_details:
                self.prompt_tokens_details = _summed(self.prompt_tokens_details, other.prompt_tokens_details)
            if other.completion_tokens_details:
                self.completion_tokens_details = _summed(
                    self.completion_tokens_details, other.completion_tokens_details
                )


def _summed(into: dict[str, Any] | msgspec.UnsetType | None, more: dict[str, Any]) -> dict[str, Any]:
    """Detail counts added per key (numbers only: anything else an upstream puts there is kept as it came)."""
    total = dict(into) if isinstance(into, dict) else {}
    for key, value in more.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            before = total.get(key, 0)
            total[key] = before + value if isinstance(before, int | float) else value
        else:
            total.setdefault(key, value)
    return total


class _Message(msgspec.Struct):
    role: str | None = None
    content: str | None = None
    tool_calls: list[Any] | None = None
    reasoning_content: str | None = None  # vLLM, DeepSeek, llama.cpp: what a reasoning model thought
    reasoning: str | None = None  # the same, as other servers name it


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class Completion(msgspec.Struct, dict=True):
    """The parts of an upstream `chat.completion` the workflows read; `source` is the whole body as sent (the
    response relays the rest of it untouched: see `Answer.source`)."""

    choices: list[_Choice]
    usage: Usage | None = None

    @property
    def source(self) -> bytes | None:
        source: bytes | None = self.__dict__.get("source")
        return source

    def with_source(self, body: bytes) -> Completion:
        self.__dict__["source"] = body
        return self

    @classmethod
    def of_answer(cls, answer: Answer, usage: Usage) -> Completion:
        """A run's answer as a completion (a stage run by another served model), with the run's total usage."""
        choices = [
            _Choice(_Message("assistant", one.content, one.tool_calls), one.finish_reason)
            for one in (answer, *answer.more)
        ]
        return cls(choices, usage)

    @property
    def reasoning(self) -> str | None:
        """The first choice's reasoning text, where the upstream gave one (never part of the answer)."""
        message = self.choices[0].message
        return message.reasoning_content or message.reasoning

    @property
    def content(self) -> str | None:
        return self.choices[0].message.content

    @property
    def tool_calls(self) -> list[Any] | None:
        return self.choices[0].message.tool_calls or None

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason


@dataclass(slots=True)
class Answer:
    """What the client gets: the text, the tool calls and why the model stopped."""

    content: str | None = None
    tool_calls: list[Any] | None = None
    finish_reason: str | None = None
    more: tuple[Answer, ...] = ()  # the choices after the first, when the upstream gave several (`n`)
    # The upstream completion this answer came from, as sent: the response relays its other fields (top-level,
    # choice and message fields such as `system_fingerprint`, `logprobs`, `reasoning_content`) untouched.
    source: bytes | None = None
    edited: bool = False  # the first choice's text is not the source's (an adapter's edits)

    @classmethod
    def of(cls, completion: Completion) -> Answer:
        """The completion's first choice, with the others in `more` (only `direct` answers with them)."""
        choices = completion.choices
        more = tuple(cls._of(choice) for choice in choices[1:]) if len(choices) > 1 else ()
        # An upstream message without its role is not relayed as sent: the client's answer is built whole instead.
        source = completion.source if all(choice.message.role for choice in choices) else None
        return cls(completion.content, completion.tool_calls, completion.finish_reason, more, source)

    def with_text(self, content: str) -> Answer:
        """This answer with its first choice's text replaced (an adapter's edits); everything else kept."""
        return Answer(content, self.tool_calls, self.finish_reason, self.more, self.source, edited=True)

    @staticmethod
    def _of(choice: _Choice) -> Answer:
        return Answer(choice.message.content, choice.message.tool_calls or None, choice.finish_reason)


@dataclass(frozen=True, slots=True)
class StageTarget:
    """Where one stage's upstream call goes, and the env var (if any) whose value is its bearer token."""

    model: str
    base_url: str
    key_env: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # `forward_client_authorization`: the caller's bearer token goes here instead of the server's key (or none).
    forward_client_authorization: bool = False
    client_token: str | None = field(default=None, repr=False, compare=False)
    # Resilience (None: the server-wide setting); `fallbacks` are tried in order once this target is exhausted.
    retries: int | None = None
    timeout_seconds: float | None = None
    connect_timeout_seconds: float | None = None
    fallbacks: tuple[StageTarget, ...] = ()
    # The protocol its calls speak (a registered protocol with an upstream side: `openai`, `anthropic`, …).
    protocol: str = "openai"
    # The checked addresses to connect to, for an override URL only `"*"` allows (see `upstream.pinning`).
    pinned: tuple[str, ...] = ()
    # Another served model whose whole workflow runs as this stage, in-process (`model` is its id, no `base_url`).
    served: str | None = None
    # `model@base_url`, userinfo masked (`served:<id>` for a served model): how logs, errors and the extension name
    # the target (made once).
    label: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        label = f"served:{self.served}" if self.served is not None else f"{self.model}@{redact_userinfo(self.base_url)}"
        object.__setattr__(self, "label", label)

    @classmethod
    def of_served(cls, served_id: str) -> StageTarget:
        """A stage run by the served model `served_id` (no retries here: its own stage calls have theirs)."""
        return cls(model=served_id, base_url="", retries=0, served=served_id)


@dataclass(frozen=True, slots=True)
class Plan:
    """A request's resolved workflow: the mode, the API target, every other stage target by its config key
    (`adapter`, `critic`, …; a role with no configured target falls back to `api`) and the mode's settings."""

    served_id: str
    mode: str
    api: StageTarget
    targets: Mapping[str, StageTarget] = field(default_factory=dict)
    settings: Any = None  # the workflow's `Settings` struct
    on_review_error: Literal["draft", "fail"] = "draft"
    lessons: tuple[str, ...] = ()  # what its reviewers learnt (docs/guides/learning.md), in their system prompts
    lessons_version: int | None = None  # the version of those lessons (None: it has none)
    route: Mapping[str, Any] | None = None  # an `auto` model's decision for this request (docs/guides/routing.md)

    def target(self, role: str) -> StageTarget:
        """The stage target configured (or overridden) under `role`, else the API target."""
        return self.targets.get(role, self.api)

    @property
    def draft(self) -> StageTarget:
        """Where the first API call goes: the `draft` target (another served model's answer is the draft, in a
        workflow that reviews one), else the API target."""
        return self.targets.get(DRAFT, self.api)

    @property
    def nests(self) -> bool:
        """Whether a stage of this plan runs another served model's workflow."""
        return any(target.served is not None for target in (self.api, *self.targets.values()))

    def all_targets(self) -> list[StageTarget]:
        """Every target a call of this plan may go to, fallbacks included."""
        primaries = [self.api, *self.targets.values()]
        return [t for primary in primaries for t in (primary, *primary.fallbacks)]


@dataclass(frozen=True, slots=True)
class FinalCall:
    """The last upstream call of a run, whose answer is the client's (streamed live when streaming)."""

    stage: str
    target: StageTarget
    messages: Any  # sent with the request's options laid over the target's, like every API-stage call
    first: bool = False  # also the run's first API call: its failure is the request's failure, never degraded
