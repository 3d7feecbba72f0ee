"""The network transport (`_transport`): httpx's own and the aiohttp one must fail, stream and cancel alike.

Every test runs twice, once per transport, against real loopback servers that misbehave on purpose: refuse,
never accept, never answer, hang up, answer garbage, reset mid-body. Failures are checked twice: as the httpx
exception the shared client raises, and as the §7 status the app answers (timeouts 504, everything else 502).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import anyio
import anyio.abc
import httpx
import pytest
from asgi_lifespan import LifespanManager

from adapter_critic import Config, create_app
from adapter_critic.upstream import transport as _transport

from ..conftest import asgi_client, chat
from ..helpers import completion, usage

pytestmark = pytest.mark.anyio

COMPLETION = completion("hi there", model="api-model", created=1700000000, tokens=usage(1, 2))
CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "hi "}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "there"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}},
]
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
TIMEOUT = 0.5


# -- loopback servers -----------------------------------------------------------------------------

Behaviour = Callable[["Server", anyio.abc.SocketStream, bytes], Awaitable[bool]]


class Server:
    """A raw HTTP/1.1 server on loopback; `behaviour` answers each request (False: drop the connection)."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.disconnected = anyio.Event()  # a `wait_for_disconnect` request saw the client hang up
        self.resume = anyio.Event()  # lets `live_stream` send the rest of its events
        self.url = ""

    async def handle(self, stream: anyio.abc.SocketStream) -> None:
        buffer = b""
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            async with stream:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        buffer += await stream.receive()
                    head, _, buffer = buffer.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(buffer) < length:
                        buffer += await stream.receive()
                    body, buffer = buffer[:length], buffer[length:]
                    if not await self.behaviour(self, stream, body):
                        return


@contextlib.asynccontextmanager
async def serve(behaviour: Behaviour) -> AsyncIterator[Server]:
    server = Server(behaviour)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    server.url = f"http://127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}/v1"
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        yield server
        tg.cancel_scope.cancel()


def _event(data: object) -> bytes:
    payload = b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def complete(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    if json.loads(body).get("stream"):
        await stream.send(SSE_HEAD + b"".join(_event(chunk) for chunk in CHUNKS) + _event(b"[DONE]") + b"0\r\n\r\n")
        return True
    payload = json.dumps(COMPLETION).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(payload)
    await stream.send(head + payload)
    return True


async def live_stream(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    """The first event at once, the rest only after the client has seen it (a buffering client deadlocks)."""
    await stream.send(SSE_HEAD + _event(CHUNKS[0]) + _event(CHUNKS[1]))
    await server.resume.wait()
    await stream.send(b"".join(_event(chunk) for chunk in CHUNKS[2:]) + _event(b"[DONE]") + b"0\r\n\r\n")
    return True


async def wait_for_disconnect(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    """Never answer; note when the client closes the connection."""
    try:
        await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        server.disconnected.set()
    return False


async def hang_up(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    return False


async def garbage(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    await stream.send(b"SURPRISE\r\n\r\n")
    return False


async def reset_mid_body(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    await stream.send(head + b'{"choices": [')
    await _reset(stream)
    return False


async def reset_mid_stream(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
    await stream.send(SSE_HEAD + _event(CHUNKS[0]) + _event(CHUNKS[1]))
    await _reset(stream)
    return False


async def _reset(stream: anyio.abc.SocketStream) -> None:
    """Close with a TCP RST instead of a FIN, after the data sent so far has had time to arrive."""
    await anyio.sleep(0.05)
    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@contextlib.contextmanager
def unaccepted_url() -> Iterator[str]:
    """A listener whose accept queue is full, so a new connection's SYN goes unanswered: a connect timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(address)
        fillers.append(filler)
    try:
        yield f"http://{address[0]}:{address[1]}/v1"
    finally:
        for sock in [*fillers, listener]:
            sock.close()


# -- the shared client, as `Upstream.open` builds it ----------------------------------------------


def network_client(limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    limits = limits or httpx.Limits(max_connections=16)
    return _transport.network_client(timeout=httpx.Timeout(TIMEOUT), limits=limits)


BODY = b'{"model": "api-model", "messages": []}'
STREAM_BODY = b'{"model": "api-model", "messages": [], "stream": true}'


async def test_transport_choice(transport_kind: str) -> None:
    async with network_client() as client:
        expected = _transport.AiohttpTransport if transport_kind == "aiohttp" else httpx.AsyncHTTPTransport
        assert isinstance(client._transport, expected)


async def test_proxy_env_falls_back_to_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert _transport.network_transport(httpx.Limits()) is None


async def test_no_cookies_are_kept(transport_kind: str) -> None:
    """One caller's upstream answer must not set a cookie that the next caller's request carries."""
    seen: list[bytes] = []

    async def sets_cookie(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
        seen.append(body)
        payload = json.dumps(COMPLETION).encode()
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nset-cookie: session=caller-1; Path=/\r\n"
        await stream.send(head + b"content-length: %d\r\n\r\n" % len(payload) + payload)
        return True

    async with serve(sets_cookie) as server, network_client() as client:
        await client.post(server.url, content=BODY)
        second = await client.post(server.url, content=BODY)
        assert "cookie" not in second.request.headers
        assert not client.cookies
        with pytest.raises(RuntimeError):
            client.cookies = {"a": "b"}


async def test_urls_are_parsed_once() -> None:
    async with network_client() as client:
        first = client.build_request("POST", "http://127.0.0.1:9/v1/chat/completions")
        second = client.build_request("POST", "http://127.0.0.1:9/v1/chat/completions")
    assert first.url == second.url == httpx.URL("http://127.0.0.1:9/v1/chat/completions")
    assert _transport._parse_url.cache_info().hits >= 1


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (hang_up, (httpx.RemoteProtocolError, httpx.ReadError)),
        (garbage, httpx.RemoteProtocolError),
        (reset_mid_body, httpx.ReadError),
        (wait_for_disconnect, httpx.ReadTimeout),
    ],
)
@pytest.mark.parametrize("streamed", [False, True])
async def test_failures_raise_the_same_httpx_errors(
    transport_kind: str, behaviour: Behaviour, expected: type[Exception] | tuple[type[Exception], ...], streamed: bool
) -> None:
    async with serve(behaviour) as server, network_client() as client:
        with pytest.raises(httpx.TransportError) as caught:
            if streamed:
                async with client.stream("POST", server.url, content=STREAM_BODY) as response:
                    await response.aread()
            else:
                await client.post(server.url, content=BODY)
    assert isinstance(caught.value, expected), repr(caught.value)
    timeout = isinstance(caught.value, httpx.TimeoutException)
    assert timeout == (behaviour is wait_for_disconnect)


async def test_refused_is_connect_error(transport_kind: str) -> None:
    async with network_client() as client:
        with pytest.raises(httpx.ConnectError):
            await client.post(refused_url(), content=BODY)


async def test_unaccepted_is_connect_timeout(transport_kind: str) -> None:
    async with network_client() as client:
        with unaccepted_url() as url, pytest.raises(httpx.ConnectTimeout):
            await client.post(url, content=BODY)


async def test_stream_is_relayed_as_it_arrives(transport_kind: str) -> None:
    async with serve(live_stream) as server, network_client() as client:
        with anyio.fail_after(5):
            async with client.stream("POST", server.url, content=STREAM_BODY) as response:
                received = b""
                async for chunk in response.aiter_bytes():
                    received += chunk
                    if b'"hi "' in received:
                        server.resume.set()  # only now does the server send the rest
        assert received.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("streamed", [False, True])
async def test_cancelled_call_releases_its_connection(transport_kind: str, streamed: bool) -> None:
    """A call cancelled while waiting (for headers, or mid-stream) must not keep the pool's only connection."""

    async def stalled(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
        if b"stall" not in body:
            return await complete(server, stream, body)
        if streamed:
            await stream.send(SSE_HEAD + _event(CHUNKS[0]))
        return await wait_for_disconnect(server, stream, body)

    async with serve(stalled) as server, network_client(httpx.Limits(max_connections=1)) as client:
        with anyio.move_on_after(0.2) as scope:
            async with client.stream("POST", server.url, content=b'{"stall": true}') as response:
                async for _ in response.aiter_bytes():
                    pass
        assert scope.cancelled_caught
        with anyio.fail_after(2):
            await server.disconnected.wait()
            response = await client.post(server.url, content=BODY)
        assert response.json() == COMPLETION


# -- the direct POST (`AiohttpTransport.post`): what the app's calls to configured upstreams use ----------


@contextlib.asynccontextmanager
async def direct(limits: httpx.Limits | None = None) -> AsyncIterator[_transport.AiohttpTransport]:
    transport = _transport.AiohttpTransport(limits=limits or httpx.Limits(max_connections=16))
    try:
        yield transport
    finally:
        await transport.aclose()


async def direct_post(transport: _transport.AiohttpTransport, url: str, body: bytes) -> tuple[int, bytes]:
    """The answer, or httpx's error: opening raises one, reading the body raises aiohttp's, mapped here as the
    upstream client maps it (`failures.transport_error`)."""
    headers = {"content-type": "application/json"}
    async with transport.post(url, headers, body, httpx.Timeout(TIMEOUT)) as (status, _, chunks):
        try:
            return status, b"".join([chunk async for chunk in chunks])
        except _transport.AIOHTTP_ERRORS as exc:
            raise _transport.as_httpx_error(exc) from exc


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (hang_up, (httpx.RemoteProtocolError, httpx.ReadError)),
        (garbage, httpx.RemoteProtocolError),
        (reset_mid_body, httpx.ReadError),
        (reset_mid_stream, httpx.ReadError),
        (wait_for_disconnect, httpx.ReadTimeout),
    ],
)
async def test_direct_post_failures_raise_the_same_httpx_errors(
    behaviour: Behaviour, expected: type[Exception] | tuple[type[Exception], ...]
) -> None:
    async with serve(behaviour) as server, direct() as transport:
        with pytest.raises(httpx.TransportError) as caught:
            await direct_post(transport, server.url, BODY)
    assert isinstance(caught.value, expected), repr(caught.value)
    assert isinstance(caught.value, httpx.TimeoutException) == (behaviour is wait_for_disconnect)


async def test_direct_post_refused_and_unaccepted() -> None:
    async with direct() as transport:
        with pytest.raises(httpx.ConnectError):
            await direct_post(transport, refused_url(), BODY)
        with unaccepted_url() as url, pytest.raises(httpx.ConnectTimeout):
            await direct_post(transport, url, BODY)


async def test_direct_post_answers_and_streams_as_it_arrives() -> None:
    async with serve(live_stream) as server, direct() as transport:
        with anyio.fail_after(5):
            headers = {"content-type": "application/json"}
            async with transport.post(server.url, headers, STREAM_BODY, httpx.Timeout(TIMEOUT)) as opened:
                status, answer_headers, chunks = opened
                assert status == 200
                assert answer_headers.get("Content-Type") == "text/event-stream"
                received = b""
                async for chunk in chunks:
                    received += chunk
                    if b'"hi "' in received:
                        server.resume.set()  # only now does the server send the rest
    assert received.endswith(b"data: [DONE]\n\n")


async def test_direct_post_cancelled_releases_its_connection() -> None:
    async def stalled(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
        return await (wait_for_disconnect if b"stall" in body else complete)(server, stream, body)

    async with serve(stalled) as server, direct(httpx.Limits(max_connections=1)) as transport:
        with anyio.move_on_after(0.2) as scope:
            await direct_post(transport, server.url, b'{"stall": true}')
        assert scope.cancelled_caught
        with anyio.fail_after(2):
            await server.disconnected.wait()
            status, body = await direct_post(transport, server.url, BODY)
    assert (status, json.loads(body)) == (200, COMPLETION)


async def test_app_calls_configured_upstreams_directly(transport_kind: str) -> None:
    """Over aiohttp the app's own calls skip httpx's request and response objects; with httpx alone they cannot."""
    app = create_app(config_for("http://127.0.0.1:9/v1"))
    async with LifespanManager(app):
        upstream = app.state.adapter_critic.upstream
        if transport_kind == "aiohttp":
            assert upstream._direct is upstream._client._transport is upstream._client.aiohttp_transport
        else:
            assert upstream._direct is None


async def test_app_decodes_a_gzip_answer_on_either_path(transport_kind: str) -> None:
    async def gzipped(server: Server, stream: anyio.abc.SocketStream, body: bytes) -> bool:
        payload = gzip.compress(json.dumps(COMPLETION).encode())
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
        await stream.send(head + b"content-length: %d\r\n\r\n" % len(payload) + payload)
        return True

    async with serve(gzipped) as server, app_client(server.url) as client:
        response = await client.post("/chat/completions", json=chat("m"))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hi there"


# -- through the app ------------------------------------------------------------------------------


def config_for(url: str, timeout: float = TIMEOUT) -> Config:
    return Config.from_dict(
        {
            "timeout_seconds": timeout,
            "connect_timeout_seconds": timeout,
            "retries": 0,
            "served_models": {"m": {"mode": "direct", "api": {"model": "api-model", "base_url": url}}},
        }
    )


@contextlib.asynccontextmanager
async def app_client(url: str, upstream_timeout: float = TIMEOUT) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its own upstream client (the transport under test), called in-process; `upstream_timeout` is
    its upstream timeouts (short: the timeout tests wait them out)."""
    app = create_app(config_for(url, upstream_timeout))
    async with asgi_client(app) as client:
        yield client


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "upstream_error"
    assert error["code"] == code
    return str(error["message"])


async def test_app_uses_the_chosen_transport(transport_kind: str) -> None:
    app = create_app(config_for("http://127.0.0.1:9/v1"))
    async with LifespanManager(app):
        client = app.state.adapter_critic.upstream._client
        expected = _transport.AiohttpTransport if transport_kind == "aiohttp" else httpx.AsyncHTTPTransport
        assert isinstance(client._transport, expected)


async def test_app_answers_through_the_transport(transport_kind: str) -> None:
    async with serve(complete) as server, app_client(server.url) as client:
        response = await client.post("/chat/completions", json=chat("m"))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hi there"
    assert response.json()["usage"]["total_tokens"] == 3


async def test_app_streams_through_the_transport(transport_kind: str) -> None:
    async with serve(complete) as server, app_client(server.url) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    assert response.status_code == 200, response.text
    payloads = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    text = "".join(
        choice["delta"].get("content") or "" for payload in payloads[:-1] for choice in json.loads(payload)["choices"]
    )
    assert text == "hi there"


async def test_app_refused_is_502_in_the_projects_words(transport_kind: str) -> None:
    url = refused_url()
    async with app_client(url) as client:
        response = await client.post("/chat/completions", json=chat("m"))
    message = assert_error(response, 502)
    where = httpx.URL(url)
    # The same words over either transport, never the transport library's own (`ssl:default`, `ClientConnectorError`).
    assert f"could not be reached: could not connect to {where.host}:{where.port} (connection refused)." in message
    assert "ssl:default" not in message and "Error" not in message


async def test_app_connect_timeout_is_504(transport_kind: str) -> None:
    with unaccepted_url() as url:
        async with app_client(url) as client:
            response = await client.post("/chat/completions", json=chat("m"))
    assert_error(response, 504, "upstream_timeout")


async def test_app_read_timeout_is_504(transport_kind: str) -> None:
    async with serve(wait_for_disconnect) as server, app_client(server.url) as client:
        response = await client.post("/chat/completions", json=chat("m"))
    assert_error(response, 504, "upstream_timeout")


@pytest.mark.parametrize("behaviour", [hang_up, garbage, reset_mid_body])
async def test_app_broken_upstream_is_502(transport_kind: str, behaviour: Behaviour) -> None:
    # Answered at once: a timeout far above that keeps a loaded machine from turning the 502 into a 504.
    async with serve(behaviour) as server, app_client(server.url, upstream_timeout=30) as client:
        response = await client.post("/chat/completions", json=chat("m"))
    assert_error(response, 502)


async def test_app_reset_mid_stream_ends_the_stream_with_an_error(transport_kind: str) -> None:
    async with serve(reset_mid_stream) as server, app_client(server.url) as client:
        response = await client.post("/chat/completions", json=chat("m", stream=True))
    assert response.status_code == 200
    payloads = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    assert "[DONE]" not in response.text
    assert payloads[-1]["error"]["type"] == "upstream_error"
    assert "timeout" not in payloads[-1]["error"]["message"].lower()


async def test_app_cancelled_request_closes_the_upstream_connection(transport_kind: str) -> None:
    async with serve(wait_for_disconnect) as server, app_client(server.url) as client:
        with anyio.move_on_after(0.2) as scope:
            await client.post("/chat/completions", json=chat("m"))
        assert scope.cancelled_caught
        with anyio.fail_after(2):
            await server.disconnected.wait()
