"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The shared client for network upstreams, and the transport under it.

The transport is aiohttp's HTTP/1.1 client when `httpx-aiohttp` is installed (several times less CPU per call
than httpx's own connection layer), httpx's default transport otherwise. The httpx API stays the same either
way, but `httpx_aiohttp` translates aiohttp's exceptions loosely: a refused connection or a server that hangs
up becomes `httpx.ConnectTimeout` (a timeout, so a 504 instead of a 502), and a malformed response escapes as a
bare `aiohttp.ClientResponseError`. `AiohttpTransport` here re-maps every aiohttp error by its original type to
the exception httpx's own transport raises in the same situation.

The client (`ProxyClient`) is an `httpx.AsyncClient` without the state a proxy must not share between callers.
Calls to configured upstreams skip even that: `AiohttpTransport.post` sends a POST on the same aiohttp session
without building httpx's request and response objects (a third of a direct request's CPU went there), with the
same timeouts and error mapping.
"""

from __future__ import annotations

import contextlib
import functools
import types
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any, NoReturn

import httpx

from .decoding import decoded
from .readtimeout import lazy_read_timeouts

try:
    import aiohttp
    import yarl
    from httpx_aiohttp import AiohttpTransport as _BaseAiohttpTransport
except ImportError:  # the plain-httpx install
    aiohttp = None  # type: ignore[assignment]
    yarl = None  # type: ignore[assignment]
    _BaseAiohttpTransport = None  # type: ignore[assignment,misc]

__all__ = [
    "AIOHTTP_ERRORS",
    "AiohttpTransport",
    "ProxyClient",
    "aiohttp_available",
    "as_httpx_error",
    "network_client",
    "network_transport",
]

# What reading a body from `AiohttpTransport.post` may raise besides httpx's errors (`as_httpx_error` maps them).
AIOHTTP_ERRORS: tuple[type[Exception], ...] = () if aiohttp is None else (aiohttp.ClientError,)


def aiohttp_available() -> bool:
    return _BaseAiohttpTransport is not None


def network_client(*, timeout: httpx.Timeout, limits: httpx.Limits) -> ProxyClient:
    """The shared client for every network upstream, over `network_transport`."""
    return ProxyClient(transport=network_transport(limits), timeout=timeout, limits=limits, follow_redirects=False)


def network_transport(limits: httpx.Limits) -> httpx.AsyncBaseTransport | None:
    """The transport for network upstreams, or None for httpx's default.

    httpx's default is also used when proxy env vars (`HTTPS_PROXY`, ...) are set: the aiohttp transport
    ignores them, and httpx honours them only for the transport it builds itself.
    """
    if not aiohttp_available() or _proxies_configured():
        return None
    return AiohttpTransport(limits=limits)


def _proxies_configured() -> bool:
    # The same lookup httpx makes for `trust_env` (env vars, and the system settings on macOS and Windows).
    proxies = urllib.request.getproxies()
    return any(scheme in proxies for scheme in ("http", "https", "all"))


class ProxyClient(httpx.AsyncClient):
    """An `httpx.AsyncClient` that keeps no cookies and parses each upstream URL once.

    - No cookie jar: a `Set-Cookie` in one caller's upstream answer must never ride along on another caller's
      request (and extracting cookies costs a urllib request object and a URL parse per call).
    - URLs given as strings are parsed once and cached as `httpx.URL`s (immutable, so shareable): a proxy
      calls the same few upstream URLs over and over, and parsing one costs as much as the rest of building
      the request.
    """

    @property
    def cookies(self) -> httpx.Cookies:
        return _NO_COOKIES

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        raise RuntimeError("ProxyClient keeps no cookies; set them per request in the headers instead")

    def build_request(self, method: str, url: httpx.URL | str, **kwargs: Any) -> httpx.Request:
        return super().build_request(method, _parse_url(url) if isinstance(url, str) else url, **kwargs)

    @property
    def aiohttp_transport(self) -> AiohttpTransport | None:
        """The aiohttp transport under this client, whose `post` callers may use directly; None over httpx's own."""
        transport = self._transport
        return transport if isinstance(transport, AiohttpTransport) else None


class _NoCookies(httpx.Cookies):
    """Always empty: whatever an answer sets is dropped."""

    def extract_cookies(self, response: httpx.Response) -> None:
        pass

    def set(self, name: str, value: str, domain: str = "", path: str = "/") -> None:
        pass

    def update(self, cookies: Any = None) -> None:  # type: ignore[override]  # as httpx.Cookies.update
        pass


_NO_COOKIES = _NoCookies()


@functools.lru_cache(maxsize=512)
def _parse_url(url: str) -> httpx.URL:
    return httpx.URL(url)


class AiohttpTransport(httpx.AsyncBaseTransport):
    """`httpx_aiohttp.AiohttpTransport` with aiohttp's errors mapped as httpx's own transport maps them."""

    def __init__(self, **kwargs: Any) -> None:
        if _BaseAiohttpTransport is None:
            raise RuntimeError("AiohttpTransport needs the `httpx-aiohttp` package: pip install httpx-aiohttp")
        self._inner = _BaseAiohttpTransport(**kwargs)
        made = self._inner.get_client
        # Whoever makes the session first (this transport's `post` or httpx's call), its connections restart the
        # read timeout without a timer per read (`readtimeout`).
        self._inner.get_client = lambda: _lazy_read_timeouts(made())  # type: ignore[method-assign]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except Exception as exc:
            _reraise(exc)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _MappedStream(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _session(self) -> aiohttp.ClientSession:
        inner = self._inner
        if not isinstance(inner.client, aiohttp.ClientSession):
            inner.client = inner.get_client()  # what the first `handle_async_request` would make; closed by aclose
        return inner.client

    def post(
        self, url: str, headers: Mapping[str, str], content: bytes, timeouts: httpx.Timeout
    ) -> contextlib.AbstractAsyncContextManager[tuple[int, Mapping[str, str], AsyncIterator[bytes]]]:
        """POST `content` to `url` on this transport's session; yields (status, headers, the body as it is read,
        its content coding undone a bounded piece at a time: `decoding.decoded`). As `handle_async_request` would
        do it — no redirects, httpx's timeouts as aiohttp's — but without an `httpx.Request` and `httpx.Response`
        around it. Opening it raises httpx's errors (and `UndecodableAnswer`); reading the body raises aiohttp's as
        they are (`AIOHTTP_ERRORS`, no wrapper per chunk): callers catch them with the others and map them with
        `as_httpx_error`."""
        request = self._session().request(
            "POST",
            _yarl_url(url),
            headers=headers,
            data=content,
            allow_redirects=False,
            auto_decompress=False,
            compress=False,
            timeout=_client_timeout(timeouts.read, timeouts.connect, timeouts.pool),
        )
        return _Posted(request)


class _Posted(contextlib.AbstractAsyncContextManager[tuple[int, Mapping[str, str], AsyncIterator[bytes]]]):
    """`AiohttpTransport.post`'s block: the answer opened on entry (aiohttp's errors then as httpx's), released on
    exit. A class, not a generator-based context manager: every upstream call enters one."""

    __slots__ = ("_request",)

    def __init__(self, request: Any) -> None:
        self._request = request  # aiohttp's request context manager

    async def __aenter__(self) -> tuple[int, Mapping[str, str], AsyncIterator[bytes]]:
        try:
            response = await self._request.__aenter__()
        except aiohttp.ClientError as exc:
            raise _httpx_error(exc) from exc
        try:
            body = decoded(response.headers.get("content-encoding"), response.content.iter_any())
        except BaseException as exc:  # a coding that was not asked for: the answer is released all the same
            await self._request.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return response.status, response.headers, body

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        await self._request.__aexit__(kind, exc, tb)  # an error of the body's read goes on as aiohttp raised it


def _lazy_read_timeouts(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    lazy_read_timeouts(session.connector)
    return session


def as_httpx_error(exc: Exception) -> Exception:
    """`exc`, or the httpx error httpx's own transport raises in the same situation when it is aiohttp's."""
    if aiohttp is not None and isinstance(exc, aiohttp.ClientError):
        return _httpx_error(exc)
    return exc


@functools.lru_cache(maxsize=512)
def _yarl_url(url: str) -> yarl.URL:  # parsed once per upstream URL, as `_parse_url` does for httpx
    return yarl.URL(url)


@functools.lru_cache(maxsize=64)
def _client_timeout(read: float | None, connect: float | None, pool: float | None) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(sock_connect=connect, sock_read=read, connect=pool)


class _MappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except Exception as exc:
            _reraise(exc)

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        except Exception as exc:
            _reraise(exc)


def _reraise(exc: Exception) -> NoReturn:
    """Raise the httpx exception for an error out of `httpx_aiohttp`, judged by the aiohttp error underneath."""
    original = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    if aiohttp is None or not isinstance(original, aiohttp.ClientError):
        raise exc
    raise _httpx_error(original) from original


def _httpx_error(exc: aiohttp.ClientError) -> httpx.TransportError:
    message = str(exc) or type(exc).__name__
    # Most specific first: aiohttp's classes inherit from several branches at once.
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        return httpx.ProxyError(message)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientConnectionResetError):
        return httpx.ReadError(message)
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpx.UnsupportedProtocol(message)
    if isinstance(exc, aiohttp.ClientConnectionError):
        return httpx.NetworkError(message)
    return httpx.TransportError(message)
