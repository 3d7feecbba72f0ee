"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The calls to upstream models: the client, its transport, retries, limits and guards.
"""
