"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`AdapterCriticMiddleware`: the pipeline as pure ASGI middleware around an app that serves chat completions.

Only `POST <path>` requests (and `POST` on every other protocol's route beside it: `/v1/messages`) whose
`model` is a served model run through the pipeline (and such a model's `POST /v1/messages/count_tokens` is counted
as the app counts it); every other
request, and every non-HTTP scope, reaches the wrapped app untouched (a peeked body is replayed to
it byte for byte). Stage targets whose `base_url` is a path are called in-process on the wrapped app.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import Config, load_config
from ..protocols.base import Inbound
from ..protocols.openai import INBOUND as OPENAI
from ..protocols.openai.render import error_response
from ..redact import masked_logs
from ..service.compose import compose
from ..upstream.retry import Sleep
from .auth import CALLER, InboundAuth, refusal
from .chat import ChatHandler
from .count_tokens import PATH as COUNT_TOKENS_PATH
from .count_tokens import CountTokens
from .models import ServedModels, models_path
from .requestid import with_header
from .runs import RunsAPI
from .telemetry import metrics_endpoint

logger = logging.getLogger("adapter_critic")


class _ModelView(msgspec.Struct):
    model: str | None = None


_model_decoder = msgspec.json.Decoder(_ModelView)


class AdapterCriticMiddleware:
    """Run chat-completions requests for served models through the adapter_critic pipeline.

    Parameters:
        app: the wrapped ASGI app; it serves every other request, and stage targets whose
            `base_url` is a path (e.g. `"/v1"`) are called on it in-process.
        config: a `Config`, or the path of a config file.
        path: the chat-completions path to intercept.
        http_client: an `httpx.AsyncClient` for network upstreams (not closed by the middleware).
        sleep: the async function that waits between retries (default `anyio.sleep`).

    The upstream client is opened and closed with the lifespan the server runs for the wrapped app.
    Request bodies larger than `max_body_bytes` on the chat path go to the wrapped app untouched. `GET` on the
    models path beside it (`/v1/models`) lists the wrapped app's models with the served ones merged in (the
    served ones alone when the wrapped app has no such route), and a served model's `/v1/models/{id}`.
    With `[telemetry] metrics = true` it also answers `GET <metrics_path>` (`/metrics`) with its Prometheus metrics.
    With `auth_api_keys_env` set, the requests the pipeline serves need one of its keys (401 otherwise);
    every other request is left to the wrapped app and its own auth.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        config: Config | str | Path,
        path: str = "/v1/chat/completions",
        http_client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        if not isinstance(config, Config):
            config = load_config(config)
        self.app = app
        self.path = path
        self.service = compose(config, http_client=http_client, in_process_app=app, sleep=sleep)
        self.handler = ChatHandler(self.service.chat, tracing=self.service.telemetry.tracing)
        self.auth = InboundAuth(self.service.keys)
        self.models = ServedModels(app, config, models_path(path))
        self.routes: dict[str, Inbound] = {path: OPENAI}
        chat_suffix = OPENAI.path
        # Anthropic's `/v1/messages/count_tokens` beside `/v1/messages`, for a served model (as on the app).
        self.count_tokens: tuple[str, CountTokens] | None = None
        if path.endswith(chat_suffix):  # the other protocols' routes beside it: `/v1/messages`
            for inbound in self.service.protocols.inbound.values():
                self.routes.setdefault(path[: -len(chat_suffix)] + inbound.path, inbound)
            anthropic = self.service.protocols.inbound.get("/messages")
            if anthropic is not None:
                count_path = path[: -len(chat_suffix)] + COUNT_TOKENS_PATH
                self.count_tokens = (count_path, CountTokens(self.service, anthropic))
        # The runs API beside the models path (`/v1/runs`), when the store is configured and `store.api` is on.
        store = self.service.store
        self.runs_path = models_path(path).removesuffix("/models") + "/runs"
        recorded = store is not None and config.store.api
        self.runs = RunsAPI(lambda: self.service.store, self.auth, self.service.on_feedback) if recorded else None
        self.metrics = metrics_endpoint(self.service.telemetry)
        self._metrics_path = config.telemetry.metrics_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with masked_logs(self.service.secrets):  # what this middleware's work logs is masked with its own secrets
            await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        inbound = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if inbound is None and self.count_tokens is not None and scope["type"] == "http":
            count_path, counter = self.count_tokens
            if scope["method"] == "POST" and scope["path"] == count_path:
                await self._count(counter, scope, receive, send)
                return
        if inbound is None:
            if scope["type"] == "http" and scope["method"] == "GET":
                if self.models.handles(scope["path"]):
                    await self._models(scope, receive, send)
                    return
                if self.runs is not None and _under(scope["path"], self.runs_path):
                    await self._runs(scope, receive, send)
                    return
                if self.metrics is not None and scope["path"] == self._metrics_path:
                    await self._serve_metrics(self.metrics, scope, receive, send)
                    return
            elif (
                scope["type"] == "http"
                and scope["method"] == "POST"
                and self.runs is not None
                and _under(scope["path"], self.runs_path)
            ):
                await self._runs(scope, receive, send)  # POST /v1/runs/{id}/feedback
                return
            await self.app(scope, receive, send)
            return

        buffered, body, complete = await _peek_body(receive, self.service.config.max_body_bytes)
        if not complete or not self._serves(body):
            await self.app(scope, _replay(buffered, receive), send)
            return
        # Only requests the pipeline serves need our API key; the wrapped app guards the rest its own way.
        send = with_header(send, scope)
        refused = self.auth.check(scope, inbound)
        if refused is not None:
            await refusal(refused, inbound)(scope, receive, send)
            return
        await self.handler.respond(body, scope, receive, send, inbound)

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The model list; with keys bounded to some models (`models`), a key's own, which needs the key."""
        policy = self.service.chat.policy
        if not policy.any_bounds:
            await self.models(scope, receive, send)
            return
        refused = self.auth.check(scope)
        if refused is not None:
            await error_response(refused)(scope, receive, send)
            return
        caller = scope.get(CALLER)
        await self.models(scope, receive, send, allows=lambda model: policy.allows(caller, model))

    async def _count(self, counter: CountTokens, scope: Scope, receive: Receive, send: Send) -> None:
        """A served model's count here, in Anthropic's envelope; any other model's is the wrapped app's."""
        buffered, body, complete = await _peek_body(receive, self.service.config.max_body_bytes)
        if not complete or not self._serves(body):
            await self.app(scope, _replay(buffered, receive), send)
            return
        send = with_header(send, scope)
        refused = self.auth.check(scope, counter.inbound)
        if refused is not None:
            await refusal(refused, counter.inbound)(scope, receive, send)
            return
        await counter(scope, _replay(buffered, receive), send)

    async def _serve_metrics(self, metrics: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.auth.check(scope)
        await (error_response(refused) if refused is not None else metrics)(scope, receive, send)

    async def _runs(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.runs is not None
        send = with_header(send, scope)
        refused = self.auth.check(scope)
        if refused is not None:
            await error_response(refused)(scope, receive, send)
            return
        await self.runs.dispatch(scope, receive, send, scope["path"].removeprefix(self.runs_path))

    def _serves(self, body: bytes) -> bool:
        try:
            model = _model_decoder.decode(body).model
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return False
        return model is not None and self.service.config.serves(model)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.service.chat

        async def lifespan_receive() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                handler.start()
                await handler.start_recording()
            elif message["type"] == "lifespan.shutdown":
                await handler.finish()  # before the wrapped app hears of it: our requests may be calling it
            return message

        async def lifespan_send(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await handler.close()
            await send(message)

        await self.app(scope, lifespan_receive, lifespan_send)


async def _peek_body(receive: Receive, limit: int) -> tuple[list[Message], bytes, bool]:
    """Buffer the body up to `limit`; `complete` is False when it is larger (or the client left)."""
    buffered: list[Message] = []
    size = 0
    while True:
        message = await receive()
        buffered.append(message)
        if message["type"] != "http.request":
            return buffered, b"", False
        size += len(message.get("body", b""))
        if size > limit:
            return buffered, b"", False
        if not message.get("more_body", False):
            break
    return buffered, b"".join(m.get("body", b"") for m in buffered), True


def _under(path: str, base: str) -> bool:
    return path == base or path.startswith(base + "/")


def _replay(buffered: list[Message], receive: Receive) -> Receive:
    """A `receive` that hands out the already-read messages first, then the live ones."""
    pending = list(buffered)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
