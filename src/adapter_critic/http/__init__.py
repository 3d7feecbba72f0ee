"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The HTTP side: the app, the middleware, the chat handler and the composition root that builds them.
"""
