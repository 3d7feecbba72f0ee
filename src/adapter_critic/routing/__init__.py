"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Choosing per request (docs/guides/routing.md): a request's features and class, the rules and the learnt policy of an
`auto` model, and fitting that policy from measurements."""
