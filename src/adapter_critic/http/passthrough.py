"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `passthrough` upstream: every other request under the mount (`/embeddings`, `/completions`,
`/responses`, a model this server does not serve…) relayed to one configured upstream, streamed both ways,
so a sidecar can be a client's only base URL.

Credentials follow the same rule as every stage call (docs/guides/security.md): the upstream gets the key
configured for its URL, never the client's own `Authorization` — unless the target says
`forward_client_authorization`. Hop-by-hop headers are not relayed. `GET /models` lists the upstream's models with
the served ones merged in.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..access import KeyPolicy
from ..config import Config
from ..core import StageTarget
from ..errors import RequestError
from ..pipeline.resolve import bind_key
from ..protocols.openai.render import error_response
from ..upstream.client import Upstream
from ..upstream.failures import TRANSPORT_ERRORS, transport_error
from ..upstream.sizes import read_limited, sent
from .auth import CALLER, client_token
from .body import body_too_large, declared_too_large

logger = logging.getLogger("adapter_critic")
_MODEL_LIST_ERRORS: tuple[type[Exception], ...] = (
    *TRANSPORT_ERRORS,
    msgspec.DecodeError,
    UnicodeDecodeError,
    RecursionError,
)

STAGE = "passthrough"
# Not relayed in either direction: connection-level headers, and the ones this server sets itself.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"authorization",
        b"x-api-key",
        b"accept-encoding",
    }
)
_MODELS_HEADERS = ("authorization", "accept-encoding")


class _ModelList(msgspec.Struct):
    data: list[dict[str, Any]]


class Passthrough:
    """Relays requests to the configured `passthrough` upstream; an ASGI app behind a catch-all route."""

    def __init__(self, config: Config, upstream: Upstream, policy: KeyPolicy | None = None) -> None:
        assert config.passthrough is not None
        own = config.passthrough
        self.config, self.upstream = config, upstream
        self.policy = policy or KeyPolicy(config)  # a key with `models` reaches the passthrough for none of its own
        forwarding = own.forward_client_authorization
        key_env = None if forwarding else bind_key(config, own.url, own)
        self.target = StageTarget(
            own.model, own.url, key_env=key_env, forward_client_authorization=forwarding, timeout_seconds=None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = "/" + scope["path_params"].get("path", "")
        if self.bounded(scope):
            await error_response(_not_for_bounded_keys())(scope, receive, send)
            return
        await self.relay(scope, receive, send, path)

    def bounded(self, scope: Scope) -> bool:
        """The request's named key is bounded to some models (`models`): the passthrough, which could call any model
        at its upstream with its upstream key, is not for it (docs/guides/security.md#tenants)."""
        return self.policy.bounded(scope.get(CALLER))

    async def relay(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        """Relay this request to `{base_url}{path}` and its answer back, as they come."""
        target = self._target(scope)
        url = self.target.base_url + path
        query = scope.get("query_string", b"")
        if query:
            url += "?" + query.decode("latin-1")
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP_BY_HOP]
        headers.append((b"accept-encoding", b"identity"))  # relayed as it comes: no decoding on the way
        headers += [
            (k.encode(), v.encode()) for k, v in self.upstream.headers_for(target).items() if k == "authorization"
        ]
        limit = self.config.max_body_bytes
        if declared_too_large(scope, limit):
            await error_response(body_too_large(limit))(scope, receive, send)
            return
        client = self.upstream.client_for(url)
        body = _Body(receive, limit)
        request = client.build_request(scope["method"], url, headers=headers, content=body.chunks())
        try:
            response = await client.send(request, stream=True)
        except RequestError as refused:  # the body passed the limit while it was being sent (`_Body`)
            await error_response(refused)(scope, receive, send)
            return
        except TRANSPORT_ERRORS as exc:
            # aiohttp's transport wraps the refusal of a body it was sending in a send error of its own: the
            # refusal is still the answer (413, as over httpx's transport), not the upstream's failure.
            error = body.refused or transport_error(
                STAGE, target, exc, secrets=self.upstream.secrets, read_timeout=None
            )
            await error_response(error)(scope, receive, send)
            return
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
                await _send_response(response, send)
                tg.cancel_scope.cancel()
        finally:
            await response.aclose()

    async def models(self, served: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The upstream's models with the served ones merged in (the upstream's entries kept, served ids added);
        the served ones alone when the upstream does not answer with a model list."""
        url = f"{self.target.base_url}/models"
        headers = {k: v for k, v in self.upstream.headers_for(self.target).items() if k in _MODELS_HEADERS}
        limit = self.config.max_upstream_response_bytes
        try:
            async with sent(self.upstream.client_for(url), "GET", url, headers=headers, timeout=10) as response:
                content = await read_limited(response, limit) if response.status_code == 200 else b""
            listed = msgspec.json.decode(content, type=_ModelList).data if content else []
        except _MODEL_LIST_ERRORS as exc:
            logger.warning(
                "passthrough upstream's model list could not be read (%s); listing served models only",
                type(exc).__name__,
            )
            listed = []
        known = {model.get("id") for model in listed}
        return [*listed, *(model for model in served if model["id"] not in known)]

    def unless_served(self, endpoint: ASGIApp, path: str) -> ASGIApp:
        """`endpoint` (a protocol's route: `/responses`) for requests naming a served model; a request naming any
        other model is relayed to `{base_url}{path}`, as it was before this server served the path. A body that
        cannot be read, or is over the limit, is the endpoint's to refuse."""
        config, limit = self.config, self.config.max_body_bytes

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            messages: list[Message] = []
            size, more = 0, True
            while more and size <= limit:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away before its request was whole
                messages.append(message)
                size += len(message.get("body", b""))
                more = message.get("more_body", False)
            replay = _replay(messages, receive)
            model = _model_of(b"".join(m.get("body", b"") for m in messages)) if size <= limit else None
            if model is not None and not config.serves(model) and not self.bounded(scope):
                await self.relay(scope, replay, send, path)
            else:
                await endpoint(scope, replay, send)

        return app

    def _target(self, scope: Scope) -> StageTarget:
        if not self.target.forward_client_authorization:
            return self.target
        return StageTarget(
            self.target.model, self.target.base_url, forward_client_authorization=True, client_token=client_token(scope)
        )


class _ModelView(msgspec.Struct):
    model: str | None = None


_model_decoder = msgspec.json.Decoder(_ModelView)


def _model_of(body: bytes) -> str | None:
    try:
        return _model_decoder.decode(body).model
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """`receive` with the messages already read given again first."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


class _Body:
    """The request body as it arrives, refused past `limit` bytes; `refused` keeps the refusal, whatever the
    transport sending the body raised in its place."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self.receive, self.limit = receive, limit
        self.refused: RequestError | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        size = 0
        while True:
            message = await self.receive()
            if message["type"] != "http.request":
                return
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                self.refused = body_too_large(self.limit)
                raise self.refused
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return


async def _send_response(response: httpx.Response, send: Send) -> None:
    headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except TRANSPORT_ERRORS as exc:
        logger.warning(
            "passthrough upstream's answer broke off (%s); the client's answer ends here", type(exc).__name__
        )
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


def _not_for_bounded_keys() -> RequestError:
    return RequestError(
        "This key may use only its own served models (`models`), and this path is relayed to the passthrough "
        "upstream, which serves others.",
        status_code=403,
        code="permission_denied",
    )
