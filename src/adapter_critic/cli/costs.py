"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

How costs are written on a terminal (`runs list`, `runs show`, `eval`'s tables): amounts without noise, a lower
bound as `≥ amount` where some stage's cost is unknown, and `?` where nothing of it is known (docs/guides/cost.md)."""

from __future__ import annotations

from collections.abc import Sequence

from ..store.records import RunCost

SMALLEST = 0.000001


def money(amount: float) -> str:
    """`1.50`, `0.0056`, `0.000018`: cents from 1 up, below that every digit down to a millionth."""
    if amount >= 1:
        return f"{amount:,.2f}"
    if amount == 0:
        return "0.00"
    if amount < SMALLEST:
        return f"<{SMALLEST:.6f}"
    text = f"{amount:.6f}".rstrip("0")
    return text if len(text.partition(".")[2]) >= 2 else f"{amount:.2f}"


def bounded(total: float | None, known: float, unknown: bool) -> str:
    """A total, or, when part of it is unknown, `≥ known` (or `?` when nothing is known)."""
    if total is not None and not unknown:
        return money(total)
    return f"≥ {money(known)}" if known > 0 else "?"


def currency_of(costs: Sequence[RunCost | None]) -> str | None:
    """The one currency of `costs`, or None when they have none or several (then each cell names its own)."""
    found = {cost.currency for cost in costs if cost is not None}
    return found.pop() if len(found) == 1 else None


def run_cost(cost: RunCost | None, currency: str | None) -> str:
    """A run's cost for a table cell; empty when it has none (no prices, or still running). `currency`: the
    column's own (not repeated in the cell)."""
    if cost is None:
        return ""
    text = bounded(cost.total, cost.total_known, bool(cost.unknown_stages))
    return text if currency == cost.currency else f"{text} {cost.currency}"
