"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A request's run: its plan resolved, its workflow's stages run, the final call relayed.
"""
