"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `tune` prints when it is done: the candidates on the front and the baseline, on the held-out figures, as the
table of `report.md` has them (the whole table is in the reports)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ..tuning.candidates import BASELINE
from ..tuning.front import Measure
from ..tuning.report import COLUMNS, rows


def front_table(found: list[dict[str, Any]], measure: Measure) -> Table:
    """The front (★) and the baseline, best held-out score first; cost in `measure`'s unit."""
    shown = [e for e in found if e["on_front"] or e["label"] == BASELINE]
    table = Table(title=f"tune: the front of {len(found)} candidates (cost in {measure.unit})", title_justify="left")
    for number, column in enumerate(COLUMNS):
        table.add_column(column, justify="left" if number == 0 else "right")
    for row in rows(shown):
        table.add_row(*row)
    return table
