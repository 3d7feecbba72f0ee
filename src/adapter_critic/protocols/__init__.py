"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Protocols as plug-ins: the languages clients and stage targets may speak besides the pipeline's own
(OpenAI chat completions). See `base` for what a protocol is and `registry` for how they are found."""
