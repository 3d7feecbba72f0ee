"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic tune`'s search: which candidates there are (`candidates`), how the budget is spent on them
(`search`, `race`), what is reported of each (`front`, `report`) and the config that serves the winners
(`configout`). It asks its questions through an eval endpoint (`evals.endpoint`), never the HTTP app.
"""
