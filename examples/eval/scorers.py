"""A custom scorer for `adapter-critic eval`: from the repository's root,

    adapter-critic eval examples/eval/plain.jsonl -m demo-direct,demo-critic --scorer examples.eval.scorers:brevity

(`plain.jsonl`'s lines name no scorer of their own, so `--scorer` scores every one.)

A scorer is any `function(answer, item)` returning a number (or a bool, or a number and a note); `item` is the
dataset line as a dict. It may be `async`.
"""

from __future__ import annotations

from typing import Any


def brevity(answer: str, item: dict[str, Any]) -> tuple[float, str]:
    """1 for an answer of at most `metadata.max_words` words (default 20), falling linearly to 0 at twice that."""
    limit = int(item.get("metadata", {}).get("max_words", 20))
    words = len(answer.split())
    score = 1.0 if words <= limit else max(0.0, 2 - words / limit)
    return score, f"{words} words (limit {limit})"
