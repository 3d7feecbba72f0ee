"""Every error an upstream transport can raise becomes an `UpstreamError` (`upstream.failures`).

The transports are httpx's own and the in-process one (they raise httpx's exceptions), the aiohttp one (it maps
aiohttp's exceptions to httpx's, and its direct POST's body reader raises aiohttp's as they are), and the package's
body readers (size limit, content decoding, event stream). Both libraries' exception classes are enumerated, so
one that a new version adds fails here until it is mapped or listed as never raised by a transport.
"""

from __future__ import annotations

import errno
import inspect
import ssl
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx
import multidict
import pytest
import yarl

from adapter_critic.core import StageTarget
from adapter_critic.errors import StreamIncomplete, UpstreamError
from adapter_critic.redact import Secrets
from adapter_critic.upstream.decoding import UndecodableAnswer
from adapter_critic.upstream.failures import TRANSPORT_ERRORS, transport_error
from adapter_critic.upstream.sizes import ResponseTooLarge

URL = "http://upstream.test:8080/v1"
TARGET = StageTarget(model="m", base_url=URL)

# httpx's exceptions for misuse of its own API (a URL that does not parse, a cookie set twice, a stream read twice
# or not read): they come from the caller's code, never from a transport.
HTTPX_MISUSE = {
    httpx.InvalidURL,
    httpx.CookieConflict,
    httpx.StreamError,
    httpx.StreamConsumed,
    httpx.StreamClosed,
    httpx.ResponseNotRead,
    httpx.RequestNotRead,
}
# aiohttp's exceptions that no HTTP client call raises: warnings about a Content-Disposition header, the stream
# reader's internal end-of-stream signal (its iterators stop on it), and websocket errors.
AIOHTTP_NOT_FROM_A_CALL = {
    aiohttp.BadContentDispositionHeader,
    aiohttp.BadContentDispositionParam,
    aiohttp.EofStream,
    aiohttp.WSMessageTypeError,
    aiohttp.WebSocketError,
}


def exception_classes(module: Any, *roots: type[BaseException]) -> set[type[BaseException]]:
    """The exception classes `module` exports, and every subclass of `roots` the library defines."""
    found = {obj for obj in vars(module).values() if isinstance(obj, type) and issubclass(obj, BaseException)}
    pending = list(roots)
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found and sub.__module__.partition(".")[0] == module.__name__:
                found.add(sub)
                pending.append(sub)
    return found


def raised(cls: type[BaseException]) -> BaseException:
    """An instance of `cls` as the library makes it."""
    try:
        parameters = inspect.signature(cls).parameters
    except ValueError:  # a builtin exception's own constructor: any arguments
        parameters = inspect.signature(lambda *args: None).parameters
    request = httpx.Request("POST", f"{URL}/chat/completions")
    if "connection_key" in parameters:  # aiohttp's connector errors
        key = SimpleNamespace(host="upstream.test", port=8080, ssl=True, is_ssl=False)
        if "certificate_error" in parameters:
            return cls(key, ssl.SSLCertVerificationError("certificate verify failed"))  # type: ignore[call-arg]
        return cls(key, OSError(errno.ECONNREFUSED, "Connection refused"))  # type: ignore[call-arg]
    if "request_info" in parameters:  # aiohttp's response errors
        url = yarl.URL(f"{URL}/chat/completions")
        info = aiohttp.RequestInfo(url, "POST", multidict.CIMultiDictProxy(multidict.CIMultiDict()), url)
        return cls(info, (), status=502, message="Bad Gateway")  # type: ignore[call-arg]
    if "expected" in parameters:  # aiohttp.ServerFingerprintMismatch
        return cls(b"\x01" * 32, b"\x02" * 32, "upstream.test", 8080)  # type: ignore[call-arg]
    if "url" in parameters:  # aiohttp's URL errors
        return cls(yarl.URL("ftp://upstream.test/v1"))  # type: ignore[call-arg]
    if "limit" in parameters:  # ResponseTooLarge
        return cls(1024)  # type: ignore[call-arg]
    if "response" in parameters:  # httpx.HTTPStatusError
        return cls("failed", request=request, response=httpx.Response(500, request=request))  # type: ignore[call-arg]
    if "request" in parameters:  # httpx's request errors
        return cls("failed", request=request)  # type: ignore[call-arg]
    return cls("failed")


def dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


HTTPX_ERRORS = exception_classes(httpx, httpx.HTTPError) - HTTPX_MISUSE
AIOHTTP_ERRORS = exception_classes(aiohttp, aiohttp.ClientError) - AIOHTTP_NOT_FROM_A_CALL
OWN_ERRORS = {StreamIncomplete, ResponseTooLarge, UndecodableAnswer, TimeoutError}


def test_both_libraries_errors_are_enumerated() -> None:
    # The enumeration itself finds what the transports are known to raise (a guard against an empty list).
    assert {httpx.ConnectError, httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.UnsupportedProtocol} <= HTTPX_ERRORS
    assert {aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError} <= AIOHTTP_ERRORS
    assert all(issubclass(cls, aiohttp.ClientError) for cls in AIOHTTP_ERRORS)


@pytest.mark.parametrize("cls", sorted(HTTPX_ERRORS | AIOHTTP_ERRORS | OWN_ERRORS, key=dotted), ids=dotted)
def test_every_transport_error_becomes_an_upstream_error(cls: type[Exception]) -> None:
    exc = raised(cls)
    assert isinstance(exc, TRANSPORT_ERRORS)  # what the upstream client catches
    error = transport_error("api", TARGET, exc, secrets=Secrets([]), read_timeout=30.0)
    assert isinstance(error, UpstreamError)
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        expected = "timeout"
    elif isinstance(exc, ResponseTooLarge | UndecodableAnswer):
        expected = "bad_answer"
    else:
        expected = "unreachable"
    assert error.kind == expected
    assert error.message.startswith(f"The api stage's upstream ({TARGET.label}) ")
