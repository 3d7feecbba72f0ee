"""The upstream's messages as the Responses event writer reads them: a `chat.completion.chunk` (the first choice's
text, reasoning and tool-call deltas) and an OpenAI error envelope (what a failed stream's events say)."""

from __future__ import annotations

import msgspec


class _FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _CallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_CallDelta] | None = None
    reasoning_content: str | None = None  # vLLM, DeepSeek, llama.cpp
    reasoning: str | None = None  # the same, as other servers name it


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] = []


class ErrorView(msgspec.Struct):
    message: str = "The request failed."
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class _EnvelopeView(msgspec.Struct):
    error: ErrorView


chunk_decoder = msgspec.json.Decoder(_Chunk)
envelope_decoder = msgspec.json.Decoder(_EnvelopeView)
