"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A served model's `learning` table (docs/guides/learning.md): its reviewers learn from the feedback on its runs."""

from __future__ import annotations

from typing import Annotated

import msgspec


class Learning(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Reviewers that learn: `adapter-critic lessons learn` distils the feedback on this served model's runs into a
    short list of lessons, and its reviewing stages (critic, adapter, judge, lenses, verifiers…) read the active
    version in their system prompts. A version becomes active only when an eval on held-out items shows it is not
    worse."""

    learner: Annotated[str, msgspec.Meta(min_length=1)]
    """The served model that writes the lessons from the feedback (any served model of this config; a strong one)."""
    max_lessons: Annotated[int, msgspec.Meta(ge=1, le=32)] = 8
    """The most lessons a version holds."""
    holdout: Annotated[str, msgspec.Meta(min_length=1)] = "feedback"
    """What a new version is checked on: `"feedback"` (this model's runs with feedback, as `runs export
    --as-dataset` writes them) or the path of an eval dataset (JSONL)."""
    scorer: Annotated[str, msgspec.Meta(min_length=1)] = "contains"
    """How the check scores an answer: a scorer of `adapter-critic eval` (`exact`, `contains`, `judge:MODEL`…)."""
