"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What a run counts against, whatever path it takes (docs/guides/limits.md#how-it-counts): the served models it uses,
and what a cost budget reserves for it before it starts.

A run uses its own served model; every served model one of its stages runs (`served =`, a chain's draft), as deep as
they nest; and, for a prefixed name (`critic-<model>`, `[models]`), each served model whose `api` is the model it
runs on (same model, same URL). Each of those served models' limits counts the run once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

import msgspec

from ..config.models import MAX_NESTING
from ..core import ChatRequest, Plan
from ..errors import RequestError
from ..pricing import PER, PriceTable

# Completion tokens a call is taken to produce for a cost reservation when the request sets no `max_tokens`.
DEFAULT_RESERVE_TOKENS = 4096


def reached(
    plan: Plan,
    plan_of: Callable[[str], Plan],
    configured: Collection[str],
    by_target: Mapping[tuple[str, str], Sequence[str]],
) -> list[str]:
    """The served models a run of `plan` uses, its own first; `configured` are the config's served model ids (any
    other is a prefixed name), `by_target` the served models with limits by their `api` target."""
    found: list[str] = []

    def walk(one: Plan, depth: int) -> None:
        if one.served_id not in found:
            found.append(one.served_id)
        if one.served_id not in configured:
            for served_id in by_target.get((one.api.model, one.api.base_url), ()):
                if served_id not in found:
                    found.append(served_id)
        if depth < MAX_NESTING:
            for target in one.all_targets():
                if target.served is not None:
                    walk(plan_of(target.served), depth + 1)

    walk(plan, 0)
    return found


def reservation(plan: Plan, request: ChatRequest, prices: PriceTable, tokens: int | None) -> float:
    """What a cost budget holds back for a run before it starts: each of the plan's stages (one call each) at its
    model's price, its prompt estimated from the request (4 characters a token) and its answer at the request's
    `max_tokens` (or `max_completion_tokens`; else `tokens`, else `DEFAULT_RESERVE_TOKENS`)."""
    answer = _max_tokens(request) or tokens or DEFAULT_RESERVE_TOKENS
    prompt = math.ceil(len(request.messages_json) / 4)
    total = 0.0
    for target in [plan.api, *plan.targets.values()]:
        price = prices.price_of(target.model) if target.served is None else None
        if price is not None:
            total += (prompt * price.input + answer * price.output) / PER
    return total


def check_priced(plan: Plan, prices: PriceTable | None) -> None:
    """Refuse (400) a plan a request made up — with overrides or a prefixed name — that calls a model without a
    price, under a cost budget: its runs would cost the budget nothing."""
    for target in plan.all_targets():
        if target.served is None and (prices is None or prices.price_of(target.model) is None):
            raise RequestError(
                f"The model {target.model!r} has no price, and this request is under a cost budget, which counts "
                "only priced models; ask for a priced model, or have the server's operator add a price for it "
                "([prices]).",
                param="model",
                code="unpriced_model",
            )


def _max_tokens(request: ChatRequest) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        raw = request.options.get(name)
        if raw is not None:
            value = raw if isinstance(raw, int) else _decode_int(raw)
            if value is not None and value > 0:
                return value
    return None


def _decode_int(raw: object) -> int | None:
    try:
        value = msgspec.json.decode(raw) if isinstance(raw, msgspec.Raw) else raw
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
