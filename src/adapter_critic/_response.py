"""The OpenAI `chat.completion` response and its `adapter_critic` extension, as msgspec Structs (SPEC §6).

Invariant: top-level `usage` is the per-field sum of every stage's usage (`adapter_critic.tokens.total`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec

from ._upstream import Usage
from ._workflows import Outcome


class ResponseMessage(msgspec.Struct, omit_defaults=True):
    role: str
    content: str | None
    tool_calls: list[Any] | None = None


class Choice(msgspec.Struct):
    index: int
    message: ResponseMessage
    finish_reason: str | None


class Tokens(msgspec.Struct):
    stages: dict[str, Usage]
    total: Usage


class Extension(msgspec.Struct, omit_defaults=True):
    mode: str
    intermediate: dict[str, str]
    tokens: Tokens
    timings_ms: dict[str, float]
    degraded: bool = False
    targets: dict[str, str] = {}  # stage -> `model@base_url` that answered it (a fallback, after a failure)


class ChatCompletion(msgspec.Struct):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    adapter_critic: Extension


_encoder = msgspec.json.Encoder()


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def total_usage(stages: dict[str, Usage]) -> Usage:
    total = Usage()
    for usage in stages.values():
        total.add(usage)
    return total


def extension(outcome: Outcome, total_ms: float) -> Extension:
    stages = dict(outcome.usage)
    timings = {stage: round(outcome.timings_ms.get(stage, 0.0), 3) for stage in stages}
    timings["total"] = round(total_ms, 3)
    return Extension(
        mode=outcome.mode,
        intermediate=outcome.intermediate,
        tokens=Tokens(stages=stages, total=total_usage(stages)),
        timings_ms=timings,
        degraded=outcome.degraded,
        targets=outcome.targets,
    )


def build_completion(outcome: Outcome, *, served_model: str, completion_id: str, total_ms: float) -> ChatCompletion:
    ext = extension(outcome, total_ms)
    return ChatCompletion(
        id=completion_id,
        object="chat.completion",
        created=int(time.time()),
        model=served_model,
        choices=[
            Choice(
                index=0,
                message=ResponseMessage(role="assistant", content=outcome.content, tool_calls=outcome.tool_calls),
                finish_reason=outcome.finish_reason,
            )
        ],
        usage=ext.tokens.total,
        adapter_critic=ext,
    )


def encode(value: Any) -> bytes:
    return _encoder.encode(value)
