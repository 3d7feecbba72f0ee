"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Reviewers that learn (docs/guides/learning.md): `distill` turns the feedback on a served model's runs into a new
version of its lessons, asking its learner; `gate` checks that version against the active one on held-out items and
says whether it may become active. The run store keeps the versions (`store.lessons`); each run reads the active one
(`service.lessons`).
"""
