"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Which requests the exact-match cache may answer, and their key (docs/guides/cache.md).

A request is looked up when its served model has `cache = true` and it is deterministic (`temperature` 0) or asks
for it (`x_adapter_critic.cache = true`); never when it asks for several choices (`n` > 1: samples) or says
`x_adapter_critic.cache = false`.

Its key is the SHA-256 of one canonical JSON document (keys sorted, whitespace gone): the served model, the resolved
plan — every stage's target model, base URL, protocol, options and fallbacks, and the workflow's settings with its
prompts; never a key or the env var holding one — and the request's messages and the options that shape the answer
(every option but `IGNORED_OPTIONS`; a whole number the same whether written `0` or `0.0`).
The client's protocol is not in it: a request made in Anthropic's Messages and the same in chat completions share
an entry, each answered in its own protocol.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from ..core import Answer, ChatRequest, Plan, StageTarget

# Raised whenever what the key covers, or how, changes: entries of another version are never found.
VERSION = 3
# Request options that do not change the answer: how it is delivered, and labels for the caller's own books.
IGNORED_OPTIONS = frozenset(
    {"stream", "stream_options", "user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"}
)

_encoder = msgspec.json.Encoder(order="sorted")


def _value(raw: Any) -> Any:
    """An option's value as plain data (the chat-completions decoder keeps them as raw JSON)."""
    return msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw


def _numbers(value: Any) -> Any:
    """`value` with every whole float an int: `0.0` (as Anthropic's SDK sends a temperature) keys as `0` does."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers(item) for item in value]
    return value


def wanted(request: ChatRequest) -> bool:
    """Whether the request may be answered from the cache, its served model having `cache = true`."""
    overrides = request.overrides
    asked: bool | None = None if overrides is None else overrides.given.get("cache")
    if asked is False:
        return False
    options = request.options
    if "n" in options and _value(options["n"]) not in (None, 1):
        return False
    if asked:
        return True
    temperature = _value(options["temperature"]) if "temperature" in options else None
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0


def _target(target: StageTarget, plan_of: Callable[[str], Plan]) -> dict[str, Any]:
    """What of a stage target shapes its answers: never its key (nor the env var holding it), retries or timeouts.
    A stage run by another served model is that model's whole plan."""
    if target.served is not None:
        return {"served": target.served, "plan": _plan(plan_of(target.served), plan_of)}
    return {
        "model": target.model,
        "base_url": target.base_url,
        "protocol": target.protocol,
        "options": dict(target.options),
        "fallbacks": [_target(fallback, plan_of) for fallback in target.fallbacks],
    }


def _plan(plan: Plan, plan_of: Callable[[str], Plan]) -> dict[str, Any]:
    found = {
        "served_model": plan.served_id,
        "mode": plan.mode,
        "on_review_error": plan.on_review_error,
        "api": _target(plan.api, plan_of),
        "targets": {role: _target(target, plan_of) for role, target in plan.targets.items()},
        "settings": plan.settings,
    }
    if plan.lessons:  # what its reviewers learnt changes its answers (a plan without lessons keeps the key it had)
        found["lessons"] = list(plan.lessons)
    return found


def _canonical(value: Any) -> bytes:
    """`value` as JSON with every object's keys sorted and no whitespace. Encoded once as given (messages and options
    are raw JSON), then decoded and encoded again: the second pass sorts the keys, so a client's key order or spacing
    does not split the cache."""
    return _encoder.encode(msgspec.json.decode(_encoder.encode(value)))


def plan_document(plan: Plan, plan_of: Callable[[str], Plan]) -> bytes:
    """The plan's part of a key, canonical JSON; `plan_of` resolves the plans of the served models its stages run.
    It depends on the plan alone, so `AnswerCache` makes it once per plan."""
    return _canonical(_plan(plan, plan_of))


def cache_key(plan: bytes, request: ChatRequest, owner: str | None = None) -> str:
    """The request's key (64 hex digits) under its plan's document (`plan_document`): two JSON values one after the
    other, each whole, so where one ends is never in doubt; `owner` (`owner_of`) keeps a caller's answers its own."""
    options = {key: _numbers(_value(value)) for key, value in request.options.items() if key not in IGNORED_OPTIONS}
    digest = hashlib.sha256(b"%d:" % VERSION)
    if owner is not None:
        digest.update(_canonical({"owner": owner}))
    digest.update(plan)
    digest.update(_canonical([request.messages_json, options]))
    return digest.hexdigest()


def owner_of(plan: Plan, caller: str | None, client_token: str | None, shared: bool) -> str | None:
    """Whose answer a request's is: the caller's credential (as a digest, never the credential) when a target of the
    plan forwards it — the upstream checks each caller, so a hit must not skip that check; else the named key's name,
    unless the cache is `shared`; else None (one scope for everyone)."""
    if any(target.forward_client_authorization for target in plan.all_targets()):
        return "credential:" + hashlib.sha256((client_token or "").encode()).hexdigest()
    if caller is not None and not shared:
        return "key:" + caller
    return None


def real_answer(answer: Answer) -> bool:
    """An answer the upstream meant as one: text or tool calls, a finish reason other than `error`, and no top-level
    `error` in the body it came in (a 200 some servers send for a failure). Anything else is never cached."""
    source = answer.source
    if not answer.content and not answer.tool_calls:
        return False
    if answer.finish_reason == "error":
        return False
    if source is not None and b'"error"' in source:
        try:
            body = msgspec.json.decode(source)
        except msgspec.DecodeError:
            return False
        if isinstance(body, dict) and body.get("error") is not None:
            return False
    return True
