"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The OpenAI Responses API as an inbound protocol: `POST /responses` runs the served model's workflow.

`protocol` is the plug-in (registered as `responses`); `wire` holds the Structs; `inbound` maps a request onto
the run's (`items`: input items as chat messages); `outbound` a finished run onto the `response` object; and
`stream` renders a streamed run's events (from the upstream chunks, read as `protocols.openai.chunks.Chunk`).
"""
