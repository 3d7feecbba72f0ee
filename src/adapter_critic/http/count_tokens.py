"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`POST /messages/count_tokens`: Anthropic's token-counting endpoint for a served model, and Anthropic's 404 for
every other path under `/messages`.

The request is a Messages request without `max_tokens`; the answer `{"input_tokens": N}`, counted by the served
model's API target's upstream where it can count (`upstream.tokenize`: an Anthropic target's own
`/messages/count_tokens`, a vLLM or llama.cpp server's `/tokenize`, llama-cpp-python's `/extras/tokenize`), else
estimated (`protocols.anthropic.counting`).
The `x-adapter-critic-token-count` header says which: `upstream` or `estimate`. It counts the input of one call to
the API model; a workflow's other stages (a critique, a second pass) add their own input when the request runs.
`x_adapter_critic` overrides are not applied: the count is for the served model as configured. Errors come in
Anthropic's envelope (an unknown served model: `not_found_error`).
"""

from __future__ import annotations

import logging

from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core import StageTarget
from ..errors import APIError, RequestError, ServerError
from ..pipeline.resolve import resolve
from ..protocols.anthropic.counting import IMAGE_TOKENS, Counted, decode_count
from ..protocols.base import Inbound
from ..protocols.openai.render import encode
from ..service.compose import Service
from ..upstream.tokenize import TokenCounter
from .auth import CALLER, client_token
from .body import body_too_large, declared_too_large, read_body
from .fastpath import ASGIEndpoint
from .jsonanswer import JSONAnswer, protocol_error
from .passthrough import Passthrough

logger = logging.getLogger("adapter_critic")

HEADER = "x-adapter-critic-token-count"
PATH = "/messages/count_tokens"


class CountTokens:
    """The `POST /messages/count_tokens` endpoint (plain ASGI) of one service."""

    def __init__(self, service: Service, inbound: Inbound) -> None:
        self.service, self.inbound = service, inbound
        self.counter = TokenCounter(service.upstream, service.config.max_upstream_response_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        config = self.service.config
        response: JSONAnswer
        try:
            if declared_too_large(scope, config.max_body_bytes):
                raise body_too_large(config.max_body_bytes)
            counted = decode_count(await read_body(receive, config.max_body_bytes))
            token = client_token(scope, self.inbound.credential)
            self.service.chat.check_reach(counted.model, scope.get(CALLER))  # counted as a request is checked
            target = resolve(config, counted.model, None, client_token=token).api
            while target.served is not None:  # another served model's run: counted where its own API model is
                target = resolve(config, target.served, None, client_token=token).api
            tokens, how = await self.count(target, counted)
        except APIError as exc:
            response = protocol_error(self.inbound, exc, redact=self.service.secrets.redact)
        except Exception:
            logger.exception("counting tokens failed unexpectedly")
            response = protocol_error(self.inbound, ServerError("Internal server error; see the server log."))
        else:
            response = JSONAnswer(encode({"input_tokens": tokens}), headers={HEADER: how})
        await response(scope, receive, send)

    async def count(self, target: StageTarget, counted: Counted) -> tuple[int, str]:
        """The input tokens of `counted` on `target`, and how they were counted (`upstream`, `estimate`)."""
        if target.protocol == "anthropic":
            tokens = await self.counter.anthropic(target, counted.for_anthropic(target.model))
            if tokens is not None:
                return tokens, "upstream"
        elif target.protocol == "openai":
            tokenized = await self.counter.tokenize(target, counted.chat, counted.text)
            if tokenized is not None:
                tokens, kind = tokenized
                if kind != "vllm" and counted.images:  # text only: its images are estimated
                    return tokens + IMAGE_TOKENS * counted.images, "estimate"
                return tokens, "upstream"
        return counted.estimate(), "estimate"


def count_tokens_routes(service: Service, prefix: str, passthrough: Passthrough | None) -> list[Route]:
    """The count route under `prefix` when the Anthropic protocol is served, and (without a passthrough, which
    relays them) Anthropic's 404 for every other path under `{prefix}/messages/`."""
    inbound = service.protocols.inbound.get("/messages")
    if inbound is None:
        return []
    endpoint: ASGIApp = CountTokens(service, inbound)
    if passthrough is not None:  # a model this server does not serve is counted where it is served
        endpoint = passthrough.unless_served(endpoint, PATH)
        return [Route(f"{prefix}{PATH}", ASGIEndpoint(endpoint), methods=["POST"])]
    return [
        Route(f"{prefix}{PATH}", ASGIEndpoint(endpoint), methods=["POST"]),
        Route(f"{prefix}/messages/{{rest:path}}", ASGIEndpoint(_not_found(inbound, prefix))),
    ]


def _not_found(inbound: Inbound, prefix: str) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        base = f"{scope.get('root_path', '')}{prefix}/messages"
        if scope["path_params"]["rest"] == PATH.removeprefix("/messages/"):
            error = RequestError(f"Method {scope['method']} is not allowed on {base}/count_tokens.", status_code=405)
        else:
            serves = f"POST {base} and POST {base}/count_tokens"
            message = f"Unknown path {scope['path']!r}. Under {base} this server serves {serves}."
            error = RequestError(message, status_code=404)
        await protocol_error(inbound, error)(scope, receive, send)

    return app
