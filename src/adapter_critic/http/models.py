"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The middleware's `GET /v1/models`: the wrapped app's own model list with the served models merged in, so
`client.models.list()` and `client.models.retrieve(...)` work against a wrapped model server — also one that
has no models route of its own (it answers 404: the served models alone are listed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import Config
from ..pipeline.resolve import unknown_model
from ..protocols.openai import INBOUND as OPENAI
from ..protocols.openai.render import encode
from .jsonanswer import JSONAnswer, protocol_error

# The wrapped app's answer is read whole to merge it; a larger one is passed on as it is.
MAX_LIST_BYTES = 1024 * 1024


def models_path(chat_path: str) -> str:
    """The models path beside a chat-completions path (`/v1/chat/completions` -> `/v1/models`)."""
    prefix = chat_path.removesuffix("/chat/completions") if chat_path.endswith("/chat/completions") else ""
    return f"{prefix or chat_path.rpartition('/')[0]}/models"


def model_object(served_id: str, created: int) -> dict[str, Any]:
    """A served model as the OpenAI `model` object."""
    return {"id": served_id, "object": "model", "created": created, "owned_by": "adapter-critic"}


class _ModelList(msgspec.Struct):
    data: list[dict[str, Any]]
    object: str = "list"


class ServedModels:
    """Answers `GET {path}` (merged) and `GET {path}/{served id}`; an ASGI app for those requests."""

    def __init__(self, app: ASGIApp, config: Config, path: str) -> None:
        self.app, self.path, self.config = app, path, config
        self.created = int(time.time())
        self.served = [model_object(served_id, self.created) for served_id in config.served_models]
        self._by_id = {model["id"]: encode(model) for model in self.served}

    def handles(self, path: str) -> bool:
        """The models path, or a served model's below it (a prefixed one too, `[models]`, though never listed)."""
        if path == self.path:
            return True
        model = path[len(self.path) + 1 :] if path.startswith(self.path + "/") else ""
        return bool(model) and (model in self._by_id or self.config.serves(model))

    async def __call__(
        self, scope: Scope, receive: Receive, send: Send, allows: Callable[[str], bool] | None = None
    ) -> None:
        """Answer; `allows` says which served models the caller may see (None: all)."""
        served = self.served if allows is None else [model for model in self.served if allows(model["id"])]
        if scope["path"] != self.path:
            model = scope["path"][len(self.path) + 1 :]
            if allows is not None and not allows(model):
                error = unknown_model(model, [m["id"] for m in served])
                await protocol_error(OPENAI, error)(scope, receive, send)
                return
            body = self._by_id.get(model) or encode(model_object(model, self.created))
            await JSONAnswer(body)(scope, receive, send)
            return
        start, body = await _capture(self.app, scope, receive)
        if start is not None and start["status"] == 404:
            await JSONAnswer(encode({"object": "list", "data": served}))(scope, receive, send)
            return
        merged = _merged(body, served) if start is not None and start["status"] == 200 else None
        if merged is not None:
            await JSONAnswer(merged)(scope, receive, send)
            return
        await _replay(start, body, send)  # not a model list we can read: the wrapped app's answer as it was


async def _capture(app: ASGIApp, scope: Scope, receive: Receive) -> tuple[Message | None, bytes]:
    """The wrapped app's response start (None when it sent none) and its whole body (a model list is small; one
    over `MAX_LIST_BYTES` is passed on unmerged)."""
    start: Message | None = None
    parts: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start":
            start = message
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    return start, b"".join(parts)


def _merged(body: bytes, served: list[dict[str, Any]]) -> bytes | None:
    if len(body) > MAX_LIST_BYTES:
        return None
    try:
        listed = msgspec.json.decode(body, type=_ModelList)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    known = {model.get("id") for model in listed.data}
    data = [*listed.data, *(model for model in served if model["id"] not in known)]
    return encode({"object": "list", "data": data})


async def _replay(start: Message | None, body: bytes, send: Send) -> None:
    if start is None:
        start = {"type": "http.response.start", "status": 500, "headers": []}
    await send(start)
    await send({"type": "http.response.body", "body": body})
