"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A request body decoded and checked: its fields and its overrides (`x_adapter_critic`).
"""
