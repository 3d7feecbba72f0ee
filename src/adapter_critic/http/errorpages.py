"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The app's own 404, 405 and 500 (unknown path, wrong method, an unexpected failure outside a protocol's route) in the
OpenAI envelope, never a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..errors import RequestError, ServerError
from ..protocols.openai.render import error_response

logger = logging.getLogger("adapter_critic")


def error_handlers(prefix: str | None = None) -> dict[Any, Any]:
    """Starlette exception handlers answering 404/405/500 in the OpenAI envelope.

    `prefix` is where the API routes live, for the 404 message (default: the mount's `root_path`).
    """

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            root = request.scope.get("root_path", "") if prefix is None else prefix
            message = (
                f"Unknown path {request.url.path!r}. This server serves POST {root}/chat/completions, "
                f"POST {root}/messages, POST {root}/responses, GET {root}/models and GET {root}/health."
            )
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path!r}."
        else:
            message = str(exc.detail)
        error = RequestError(message, status_code=exc.status_code)
        return error_response(error, headers=exc.headers)

    return {HTTPException: http_error, Exception: _unexpected_error}


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ServerError("Internal server error; see the server log."))
