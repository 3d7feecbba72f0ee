"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The workflows (modes): the plug-in base class (`base`, public), the built-in ones and their registry.
"""
