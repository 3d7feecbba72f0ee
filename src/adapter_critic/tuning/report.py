"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`tune`'s reports: `pareto.json` (`tuning.front`'s entries), `report.md` (the table), and `report.html`, one
self-contained page — the score-against-cost plot as inline SVG with the front drawn, then the table — that opens
offline (no script, no font, no request).
"""

from __future__ import annotations

import html
import itertools
import json
import math
from pathlib import Path
from typing import Any

from ..evals.results import finite
from .front import Measure, weighed

PARETO = "pareto.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"

# The plot's size and margins, in SVG user units.
WIDTH, HEIGHT = 720, 420
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 20, 48


def write_pareto(directory: Path, about: dict[str, Any], found: list[dict[str, Any]]) -> Path:
    path = directory / PARETO
    path.write_text(json.dumps(finite({**about, "candidates": found}), indent=2) + "\n", encoding="utf-8")
    return path


def _number(value: Any, digits: int = 3) -> str:
    if not isinstance(value, int | float) or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def _ci(ci: Any) -> str:
    return f"[{_number(ci[0])}, {_number(ci[1])}]" if isinstance(ci, list) and len(ci) == 2 else "-"


def _vs(paired: Any) -> str:
    if not isinstance(paired, dict):
        return ""
    return f"{paired['mean_difference']:+.3f} (p={paired['p_sign']:.2g})"


COLUMNS = ("candidate", "score", "95% CI", "cost", "tokens", "calls", "p50 ms", "items", "vs direct", "held out")


def rows(found: list[dict[str, Any]]) -> list[list[str]]:
    """The table's rows: the front first (best held-out score first), then the rest by the items they were measured
    on, then by score."""

    def order(entry: dict[str, Any]) -> tuple[int, int, float]:
        held = entry["holdout"]
        score = (held or entry)["score"]
        # the front, then the rest by how many items their figures rest on (a score on two items says little)
        return (0 if entry["on_front"] else 1, -entry["items"], -(score if isinstance(score, int | float) else 0.0))

    table = []
    for entry in sorted(found, key=order):
        held = entry["holdout"]
        kept = f"{_number(held['score'])} {_ci(held['ci'])}" if held else ""
        name = ("★ " if entry["on_front"] else "") + entry["label"]
        table.append(
            [
                name,
                _number(entry["score"]),
                _ci(entry["ci"]),
                _number(entry["cost"], 4),
                _number(entry["tokens"]),
                _number(entry["calls"]),
                _number(entry["latency_ms"]),
                str(entry["items"]),
                _vs(entry["vs_direct"]),
                kept,
            ]
        )
    return table


def write_markdown(directory: Path, about: dict[str, Any], found: list[dict[str, Any]], measure: Measure) -> Path:
    lines = [
        f"# tune: {about['model']} on {about['dataset']}",
        "",
        f"{len(found)} candidates; {about['train_items']} training items, {about['holdout_items']} held out; "
        f"cost in {measure.unit}. ★: on the front (score up, cost down) on the held-out items.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows(found)]
    path = directory / REPORT_MD
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def plot(found: list[dict[str, Any]], measure: Measure) -> str:
    """Score against cost as an SVG: every measured candidate a dot (its label as a tooltip), the front's
    candidates larger and joined by a step line, on the held-out figures where they were checked."""
    points = []
    for entry in found:
        holdout = entry["holdout"] is not None
        cost = weighed(entry, measure, holdout=holdout)
        score = (entry["holdout"] if holdout else entry)["score"]
        if cost is None or not isinstance(score, int | float) or math.isnan(score) or not entry["items"]:
            continue
        points.append((cost, float(score), entry))
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"></svg>'
    low_x, high_x = 0.0, max(p[0] for p in points) * 1.08 or 1.0
    low_y, high_y = min(0.0, min(p[1] for p in points)), max(1.0, max(p[1] for p in points))

    def x(value: float) -> float:
        return LEFT + (value - low_x) / (high_x - low_x) * (WIDTH - LEFT - RIGHT)

    def y(value: float) -> float:
        return HEIGHT - BOTTOM - (value - low_y) / (high_y - low_y) * (HEIGHT - TOP - BOTTOM)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'role="img" aria-label="score against cost">',
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#555"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#555"/>',
    ]
    for step in range(5):
        value = low_y + (high_y - low_y) * step / 4
        parts.append(f'<text x="{LEFT - 8}" y="{y(value) + 4:.1f}" text-anchor="end" class="tick">{value:.2f}</text>')
        cost = low_x + (high_x - low_x) * step / 4
        below = HEIGHT - BOTTOM + 18
        parts.append(f'<text x="{x(cost):.1f}" y="{below}" text-anchor="middle" class="tick">{_number(cost)}</text>')
    parts.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">cost ({measure.unit})</text>'
    )
    middle = (TOP + HEIGHT - BOTTOM) / 2
    parts.append(f'<text x="14" y="{middle}" transform="rotate(-90 14 {middle})" text-anchor="middle">score</text>')
    front = sorted((p for p in points if p[2]["on_front"]), key=lambda p: p[0])
    if len(front) > 1:
        steps = []
        for (cost_a, score_a, _), (cost_b, _, _) in itertools.pairwise(front):
            steps += [f"{x(cost_a):.1f},{y(score_a):.1f}", f"{x(cost_b):.1f},{y(score_a):.1f}"]
        steps.append(f"{x(front[-1][0]):.1f},{y(front[-1][1]):.1f}")
        parts.append(f'<polyline class="front" fill="none" points="{" ".join(steps)}"/>')
    for cost, score, entry in points:
        on = entry["on_front"]
        name = html.escape(entry["label"])
        said = f"{name}: score {score:.3f}, cost {_number(cost, 4)}"
        parts.append(
            f'<circle class="{"on" if on else "off"}" cx="{x(cost):.1f}" cy="{y(score):.1f}" r="{6 if on else 3.5}">'
            f"<title>{said}</title></circle>"
        )
        if on:
            parts.append(f'<text x="{x(cost) + 8:.1f}" y="{y(score) - 8:.1f}" class="name">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.on td:first-child { font-weight: 600; }
svg .tick { font-size: 11px; fill: #555; }
svg .name { font-size: 11px; fill: #1a5fb4; }
svg circle.on { fill: #1a5fb4; }
svg circle.off { fill: #999; fill-opacity: 0.6; }
svg polyline.front { stroke: #1a5fb4; stroke-width: 2; }
"""


def write_html(directory: Path, about: dict[str, Any], found: list[dict[str, Any]], measure: Measure) -> Path:
    title = html.escape(f"tune: {about['model']} on {about['dataset']}")
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows(found):
        cells = "".join(f"<td>{html.escape(cell)}</td>" for cell in row)
        body.append(f'<tr class="{"on" if row[0].startswith("★") else "off"}">{cells}</tr>')
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{STYLE}</style></head>
<body>
<h1>{title}</h1>
<p>{len(found)} candidates; {about["train_items"]} training items, {about["holdout_items"]} held out. Cost in
{html.escape(measure.unit)}. The line joins the front (score up, cost down) on the held-out items; ★ marks it in
the table.</p>
{plot(found, measure)}
<table><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
</body></html>
"""
    path = directory / REPORT_HTML
    path.write_text(page, encoding="utf-8")
    return path
