"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`eval --effort E`'s plot, `score-for-cost.svg` in the output directory: each model a dot at its cost per item and
score, labelled; the first model's dot larger, and the dashed line of the scores weighed equal to its own at effort E
(`evals.weighed`): a model below the line does worse for its cost than the first one, above it better."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

PLOT = "score-for-cost.svg"
WIDTH, HEIGHT = 720, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 40, 20, 48


def write_plot(directory: Path, found: dict[str, Any]) -> Path:
    path = directory / PLOT
    path.write_text(plot(found) + "\n", encoding="utf-8")
    return path


def plot(found: dict[str, Any]) -> str:
    """The SVG of `found` (`evals.weighed.score_for_cost`'s figures)."""
    points = [
        (f["cost_per_item"], f["score"], model) for model, f in found["per_model"].items() if f["weighed"] is not None
    ]
    dearest = max((p[0] for p in points), default=0.0)
    high_x = dearest * 1.1 or 1.0

    def x(value: float) -> float:
        return LEFT + value / high_x * (WIDTH - LEFT - RIGHT)

    def y(value: float) -> float:
        return HEIGHT - BOTTOM - value / 1.08 * (HEIGHT - TOP - BOTTOM)

    unit, effort = html.escape(found["unit"]), found["effort"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="score against cost per item" font-family="sans-serif" font-size="12">',
        f'<clipPath id="area"><rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{y(0) - TOP}"/>'
        "</clipPath>",
        f'<line x1="{LEFT}" y1="{y(0)}" x2="{WIDTH - RIGHT}" y2="{y(0)}" stroke="#555"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y(0)}" stroke="#555"/>',
    ]
    for step in range(5):
        score, cost = step / 4, high_x * step / 4
        parts.append(f'<text x="{LEFT - 8}" y="{y(score) + 4:.1f}" text-anchor="end" fill="#555">{score:.2f}</text>')
        parts.append(f'<text x="{x(cost):.1f}" y="{y(0) + 18}" text-anchor="middle" fill="#555">{cost:.0f}</text>')
    parts.append(f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">cost per item '
                 f"({unit})</text>")  # fmt: skip
    middle = (TOP + y(0)) / 2
    parts.append(f'<text x="14" y="{middle}" transform="rotate(-90 14 {middle})" text-anchor="middle">score</text>')
    if points and dearest:
        cost, score, _ = points[0]  # the line of equal weighed score through the first model: slope (1 - E) / dearest
        slope = (1 - effort) / dearest
        (x0, y0), (x1, y1) = ((x(c), y(score + slope * (c - cost))) for c in (0.0, high_x))
        parts.append(f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" stroke="#1a5fb4" '
                     'stroke-dasharray="5 4" clip-path="url(#area)"/>')  # fmt: skip
        said = f"weighed as {html.escape(points[0][2])} at effort {effort:g}"
        parts.append(f'<text x="{LEFT + 8}" y="{TOP + 12}" fill="#1a5fb4">- - - {said}</text>')
    placed: list[tuple[float, float]] = []
    for index, (cost, score, model) in enumerate(points):
        first = index == 0
        name = html.escape(model)
        near = any(abs(x(cost) - px) < 160 and abs(y(score) - py) < 14 for px, py in placed)
        placed.append((x(cost), y(score)))
        parts.append(f'<circle cx="{x(cost):.1f}" cy="{y(score):.1f}" r="{7 if first else 4.5}" '
                     f'fill="{"#1a5fb4" if first else "#777"}"><title>{name}: score {score:.3f}, cost {cost:.4g}'
                     "</title></circle>")  # fmt: skip
        right = x(cost) > (LEFT + WIDTH - RIGHT) / 2  # labelled on its left, within the plot
        parts.append(f'<text x="{x(cost) + (-9 if right else 9):.1f}" y="{y(score) + (18 if near else -8):.1f}" '
                     f'text-anchor="{"end" if right else "start"}">{name}</text>')  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts)
