"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What a stage call costs, from the config's price table (`[prices."<model or glob>"]`, `[pricing]`;
docs/guides/cost.md).

A price is per million tokens: `input` for prompt tokens, `cached_input` for the prompt tokens the upstream read
from its cache (OpenAI's `usage.prompt_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens`, which
an Anthropic target's usage carries under the same name), `output` for completion tokens (reasoning included).
Anthropic's cache writes are input tokens like any other.

A model's price is found by its upstream model name (a stage target's `model`): an entry named exactly so, else the
first entry, in the config's order, whose name matches as a glob (`fnmatch`, case-sensitive). There are no
built-in prices: a model without one has an unknown cost, never a cost of 0.

A stage call's cost is known when the model of every attempt that reported usage has a price, and every attempt
reported its usage or was refused with an error status (an upstream does not bill a refusal). An attempt that
answered, timed out, broke off or was cancelled without saying what it used has an unknown cost: it may have been
billed. Nothing here runs when no prices are configured (the run is given no `PriceTable`).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import msgspec

from .core import Usage

PER = 1_000_000  # prices are per million tokens
DIGITS = 10  # amounts are reported rounded to this many decimal places: float sums keep no noise like 0.30000000004
_CACHE_LIMIT = 1024  # models whose price is remembered (request overrides may name any number of them)

NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class Price(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The price of one model (or of every model a glob matches), per million tokens, in `[pricing]`'s currency."""

    input: NonNegative
    """The price of a million prompt tokens."""
    output: NonNegative
    """The price of a million completion tokens (reasoning tokens are completion tokens)."""
    cached_input: NonNegative | None = None
    """The price of a million prompt tokens the upstream read from its cache (`prompt_tokens_details.cached_tokens`,
    Anthropic's `cache_read_input_tokens`); not set: `input`."""

    def __post_init__(self) -> None:
        for name in ("input", "output", "cached_input"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number")

    def cost(self, usage: Usage) -> float:
        """What `usage` costs at this price (not rounded)."""
        prompt = usage.prompt_tokens
        cached = 0
        details = usage.prompt_tokens_details
        if isinstance(details, dict):
            found = details.get("cached_tokens")
            if isinstance(found, int) and not isinstance(found, bool):
                cached = min(max(found, 0), prompt)
        cached_price = self.input if self.cached_input is None else self.cached_input
        spent = (prompt - cached) * self.input + cached * cached_price + usage.completion_tokens * self.output
        return spent / PER


class PricingConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """How `[prices]` are read: one currency for every price of the config."""

    currency: Annotated[str, msgspec.Meta(min_length=1, max_length=16)] = "USD"
    """The currency of every price in `[prices]`, and so of every cost reported (the extension's `cost.currency`, the
    run store, the `currency` label of `adapter_critic_cost_total`). A name, not a conversion: `"USD"`, `"EUR"`,
    `"credits"`."""


class PriceTable:
    """The config's prices, looked up by a target's model name (exact, then the first matching glob)."""

    def __init__(self, prices: Mapping[str, Price], currency: str) -> None:
        self.currency = currency
        self._exact = dict(prices)
        self._globs = [(name, price) for name, price in prices.items() if _is_glob(name)]
        self._found: dict[str, Price | None] = {}

    def price_of(self, model: str) -> Price | None:
        """`model`'s price; None when no entry names or matches it."""
        try:
            return self._found[model]
        except KeyError:
            pass
        price = self._exact.get(model)
        if price is None:
            price = next((p for pattern, p in self._globs if fnmatch.fnmatchcase(model, pattern)), None)
        if len(self._found) < _CACHE_LIMIT:
            self._found[model] = price
        return price


def price_table(prices: Mapping[str, Price], pricing: PricingConfig) -> PriceTable | None:
    """The table a service prices runs with; None (no cost work at all) when no prices are configured."""
    return PriceTable(prices, pricing.currency) if prices else None


def _is_glob(name: str) -> bool:
    return any(char in name for char in "*?[")


@dataclass(frozen=True, slots=True)
class CallCost:
    """What one stage call cost (`events.StageFinished.cost`): `amount` is None when it is unknown."""

    currency: str
    amount: float | None


class CostTally:
    """A stage call's cost, counted attempt by attempt as `pricing`'s docstring says."""

    __slots__ = ("amount", "known", "pending", "table")

    def __init__(self, table: PriceTable) -> None:
        self.table = table
        self.amount = 0.0
        self.known = True
        self.pending = False  # an attempt is under way: if the call ends now (cancelled), its cost is unknown

    def spent(self, model: str, usage: Usage | None) -> None:
        """An attempt on `model` ended having reported `usage` (None: it reported none)."""
        self.pending = False
        if usage is None:
            self.known = False
            return
        price = self.table.price_of(model)
        if price is None:
            self.known = False
        else:
            self.amount += price.cost(usage)

    def refused(self) -> None:
        """An attempt ended with an error status and no usage: not billed."""
        self.pending = False

    def result(self) -> CallCost:
        known = self.known and not self.pending
        return CallCost(self.table.currency, round(self.amount, DIGITS) if known else None)


def rounded(amount: float) -> float:
    return round(amount, DIGITS)
