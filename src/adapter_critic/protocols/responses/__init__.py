"""The OpenAI Responses API as an inbound protocol: `POST /responses` runs the served model's workflow.

`wire` holds the Structs, `inbound` maps a request onto the run's, `outbound` a finished run onto the
`response` object, and `stream` renders a streamed run's events.
"""
