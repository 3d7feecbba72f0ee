"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Calling an ASGI app in-process with a streamed response (httpx's ASGITransport buffers the whole body).

The app runs in a task group owned by the caller's `async with`, so leaving the block — normally,
on error or on cancellation — cancels the app and nothing keeps running.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from anyio.abc import ObjectReceiveStream
from starlette.types import ASGIApp, Message


@contextlib.asynccontextmanager
async def asgi_stream(
    app: ASGIApp, *, path: str, headers: dict[str, str], body: bytes, read_timeout: float
) -> AsyncIterator[tuple[int, httpx.Headers, AsyncIterator[bytes]]]:
    """POST `body` to `path` on `app`; yields (status, headers, body chunks as the app sends them).

    `read_timeout` bounds the wait for the response to start and for each chunk, like httpx's read timeout
    (raised as `httpx.ReadTimeout`). An app that fails is reported as `httpx.RemoteProtocolError`.
    """
    to_reader, from_app = anyio.create_memory_object_stream[Message | BaseException](16)
    raw_path, _, query = path.partition("?")
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        + [(b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 0),
        "server": ("in-process", 80),
        "state": {},
    }
    request_sent = False
    app_done = anyio.Event()

    async def receive() -> Message:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await app_done.wait()  # the response is over (or was abandoned): the client has gone
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await to_reader.send(message)

    async def run_app() -> None:
        async with to_reader:
            try:
                await app(scope, receive, send)
            except Exception as exc:  # reported to the reader, who raises it in the caller's task
                await to_reader.send(exc)

    failure: Exception | None = None
    with from_app:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_app)
            try:
                start = await _next(from_app, read_timeout)
                if start["type"] != "http.response.start":
                    raise httpx.RemoteProtocolError(f"in-process app sent {start['type']!r} before the response start")
                headers_list = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in start["headers"]]
                yield start["status"], httpx.Headers(headers_list), _body(from_app, read_timeout)
            except Exception as exc:
                failure = exc  # raised below, outside the task group, so callers don't get an ExceptionGroup
            finally:
                app_done.set()
                tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _next(stream: ObjectReceiveStream[Message | BaseException], read_timeout: float) -> Message:
    try:
        with anyio.fail_after(read_timeout):
            item = await stream.receive()
    except TimeoutError:
        raise httpx.ReadTimeout("the in-process app did not answer in time") from None
    except anyio.EndOfStream:
        raise httpx.RemoteProtocolError("the in-process app ended without a complete response") from None
    if isinstance(item, BaseException):
        raise httpx.RemoteProtocolError(f"the in-process app failed: {type(item).__name__}") from item
    return item


async def _body(stream: ObjectReceiveStream[Message | BaseException], read_timeout: float) -> AsyncIterator[bytes]:
    while True:
        message = await _next(stream, read_timeout)
        if message["type"] != "http.response.body":
            continue
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return
