"""The chat-completions service shared by the app and the middleware: one request body in, one response out.

It owns the order of checks (SPEC §4): body and override checks (400), then the served model (404),
then resolution (400); and it turns every failure into the §7 envelope — no traceback reaches a client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import httpx
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ._config import Config
from ._exceptions import APIError, RequestError, ServerError
from ._request import decode_request
from ._resolve import check_overrides, resolve
from ._response import build_completion, encode, new_completion_id
from ._streaming import StreamResponse
from ._upstream import Secrets, Upstream
from ._workflows import Run

logger = logging.getLogger("adapter_critic")

JSON = "application/json"


class Service:
    """The configured pipeline and its upstream client; one per app or middleware instance."""

    def __init__(
        self,
        config: Config,
        *,
        http_client: httpx.AsyncClient | None = None,
        in_process_app: ASGIApp | None = None,
    ) -> None:
        self.config = config
        self.secrets = Secrets(config.key_env_names())
        self.upstream = Upstream(
            timeout=config.timeout_seconds,
            secrets=self.secrets,
            client=http_client,
            in_process_app=in_process_app,
        )

    async def chat(self, body: bytes) -> ASGIApp:
        """Run one chat-completions request body through its workflow; returns the response to send.

        A streaming request's workflow runs inside the returned response, as it is sent.
        """
        completion_id = new_completion_id()
        started = time.perf_counter()
        try:
            request = decode_request(body)
            check_overrides(self.config, request.overrides, request.overrides_param)
            plan = resolve(self.config, request.model, request.overrides, request.overrides_param)
            run = Run(plan, request, self.upstream)
            if request.stream:
                return StreamResponse(
                    run,
                    self.upstream,
                    served_model=plan.served_id,
                    completion_id=completion_id,
                    started=started,
                    keepalive_seconds=self.config.keepalive_seconds,
                    include_usage=request.include_usage,
                )
            outcome = await run.run()
        except APIError as exc:
            return error_response(exc)
        except Exception:
            logger.exception("request %s failed unexpectedly", completion_id)
            return error_response(
                ServerError(f"Internal server error (request id {completion_id}); see the server log.")
            )
        total_ms = (time.perf_counter() - started) * 1000
        completion = build_completion(
            outcome, served_model=plan.served_id, completion_id=completion_id, total_ms=total_ms
        )
        return Response(encode(completion), media_type=JSON)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The chat-completions endpoint as plain ASGI: read the body within the limit, answer."""
        limit = self.config.max_body_bytes
        try:
            for name, value in scope["headers"]:
                if name == b"content-length" and value.isdigit() and int(value) > limit:
                    raise body_too_large(limit)
            body = await read_body(receive, limit)
        except RequestError as exc:
            await error_response(exc)(scope, receive, send)
            return
        response = await self.chat(body)
        await response(scope, receive, send)


def error_response(error: APIError, headers: Mapping[str, str] | None = None) -> Response:
    all_headers = {**error.headers, **(headers or {})}
    return Response(error.body(), status_code=error.status_code, headers=all_headers, media_type=JSON)


def body_too_large(limit: int) -> RequestError:
    return RequestError(
        f"The request body is larger than this server's limit of {limit} bytes (max_body_bytes).",
        status_code=413,
        code="request_too_large",
    )


async def read_body(receive: Receive, limit: int) -> bytes:
    """Read an HTTP request body, refusing (413) as soon as it passes `limit` rather than buffering it whole."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise body_too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
