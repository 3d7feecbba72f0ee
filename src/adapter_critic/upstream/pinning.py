"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Override URLs that only `allowed_override_base_urls = ["*"]` allows: their host names resolved and every
address checked before any call, and the calls connected to exactly the addresses checked.

A name checked once and looked up again at connect time could resolve elsewhere the second time (DNS
rebinding: a public address for the check, then 127.0.0.1 or 169.254.169.254 for the connection). So
`HostGuard.pin` resolves the name once, refuses the request (400) if any address is not an internet address
(`urlguard.address_problem`), and the stage targets carry the addresses (`StageTarget.pinned`). Their calls go
through a client of their own (`pinned_client`) whose connections are made to those addresses and never look
the name up: the `Host` header and the TLS server name (SNI and certificate check) stay the host name. It has
its own connection pool, so a pinned call never reuses a connection opened for a configured upstream, and
every connection in it was opened to a checked address. It connects directly, never through an HTTP proxy
(whose own lookup could not be checked). Configured URLs and explicitly listed ones are never resolved here:
requests without such overrides pay nothing.

The resolver is injectable (`Resolver`): tests give names the addresses they want, and no lookup leaves the
machine.
"""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import anyio
import httpcore
import httpx

try:
    import aiohttp
    import aiohttp.abc
except ImportError:  # the plain-httpx install
    aiohttp = None  # type: ignore[assignment]

from ..core import Plan, StageTarget
from ..errors import RequestError
from ..redact import redact_userinfo
from .transport import AiohttpTransport, ProxyClient, aiohttp_available
from .urlguard import address_problem, parse_url

__all__ = ["HostGuard", "Resolver", "pinned_client", "pinned_plan", "system_resolver"]

# `(host name, port) -> the addresses it resolves to`, as IP address strings.
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
# Where a request for the pinned client carries its addresses (an httpx request extension).
PINNED = "adapter_critic.pinned"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_pins: contextvars.ContextVar[tuple[str, tuple[str, ...]] | None] = contextvars.ContextVar("pins", default=None)


async def system_resolver(host: str, port: int) -> list[str]:
    """The operating system's resolver (getaddrinfo), every address once, in its order."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class HostGuard:
    """Resolves override host names and checks every address (`pin`); one per service."""

    def __init__(
        self,
        resolver: Resolver = system_resolver,
        problem: Callable[[IPAddress], str | None] = address_problem,
        *,
        timeout: float = 10.0,
    ) -> None:
        self.resolver = resolver
        self._problem = problem
        self.timeout = timeout  # for each name's lookup (the server uses `connect_timeout_seconds`)

    async def pin(self, urls: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
        """`{url: addresses}` for `(param, url)` pairs; raises a 400 naming the param if a name does not resolve
        or any of its addresses is not an internet address."""
        pins: dict[str, tuple[str, ...]] = {}
        for param, url in urls:
            if url not in pins:
                pins[url] = await self._addresses(param, url)
        return pins

    async def _addresses(self, param: str, url: str) -> tuple[str, ...]:
        parsed = parse_url(url)
        assert parsed is not None  # checked before (`check_overrides`)
        host = parsed.raw_host.decode("ascii")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        shown = redact_userinfo(url)
        try:
            with anyio.fail_after(self.timeout):
                found = await self.resolver(host, port)
            addresses = [ipaddress.ip_address(address) for address in found]
        except TimeoutError:
            raise _unresolved(param, shown, f"no answer within {self.timeout} seconds") from None
        except (OSError, UnicodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "no address"
            raise _unresolved(param, shown, reason) from None
        if not addresses:
            raise _unresolved(param, shown, "no address")
        for address in addresses:
            problem = self._problem(address)
            if problem is not None:
                raise RequestError(
                    f"`{param}`: {shown!r} resolves to {address}, so it {problem}, which "
                    'allowed_override_base_urls = ["*"] does not cover; the server\'s operator can list the URL '
                    "explicitly to allow it.",
                    param=param,
                )
        return tuple(str(address) for address in addresses)


def _unresolved(param: str, shown: str, reason: str) -> RequestError:
    return RequestError(f"`{param}`: the host of {shown!r} could not be resolved ({reason}).", param=param)


def pinned_plan(plan: Plan, pins: Mapping[str, tuple[str, ...]]) -> Plan:
    """`plan` with every target whose URL was resolved by `HostGuard.pin` carrying its addresses."""

    def pin(target: StageTarget) -> StageTarget:
        addresses = pins.get(target.base_url)
        return target if addresses is None else replace(target, pinned=addresses)

    return replace(plan, api=pin(plan.api), targets={role: pin(t) for role, t in plan.targets.items()})


def pinned_client(*, timeout: httpx.Timeout, limits: httpx.Limits, verify: ssl.SSLContext | bool = True) -> ProxyClient:
    """The client for pinned targets: each request's connection goes to the addresses in its `PINNED`
    extension, over aiohttp when `httpx-aiohttp` is installed, httpx's own transport otherwise."""
    inner: httpx.AsyncBaseTransport
    if aiohttp_available():
        ssl_context = httpx.create_ssl_context(verify=verify)

        def session() -> Any:
            connector = aiohttp.TCPConnector(
                resolver=_PinnedResolver(),
                use_dns_cache=False,
                ssl=ssl_context,
                limit=limits.max_connections or 0,
                keepalive_timeout=limits.keepalive_expiry,
            )
            return aiohttp.ClientSession(connector=connector)

        inner = AiohttpTransport(limits=limits, client=session)
    else:
        inner = _PinnedHTTPTransport(limits=limits, verify=verify)
    return ProxyClient(transport=_Pinning(inner), timeout=timeout, limits=limits, follow_redirects=False)


class _Pinning(httpx.AsyncBaseTransport):
    """Makes a request's pinned addresses known to the connection layer while the request is sent (the
    connection is opened in the sending task, so a context variable reaches it)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        addresses = request.extensions.get(PINNED)
        host = request.url.raw_host.decode("ascii")
        token = _pins.set((_host_key(host), tuple(addresses)) if addresses else None)
        try:
            return await self._inner.handle_async_request(request)
        finally:
            _pins.reset(token)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _pinned_addresses(host: str) -> tuple[str, ...]:
    """The checked addresses for `host` in this request; raises OSError (a connect error) for anything else."""
    pins = _pins.get()
    if pins is None or pins[0] != _host_key(host):
        raise OSError(f"no checked address for {host!r}: refusing to look it up")
    return pins[1]


def _host_key(host: str) -> str:
    return host.lower().rstrip(".")


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer, connecting to the pinned addresses in turn instead of resolving the name."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = _pinned_addresses(host)
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
        assert error is not None
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109  # httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("pinned connections are TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _PinnedHTTPTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over `_PinnedBackend` (httpx takes no network backend, so its pool is rebuilt)."""

    def __init__(self, *, limits: httpx.Limits, verify: ssl.SSLContext | bool) -> None:
        super().__init__(limits=limits, verify=verify)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PinnedBackend(),
        )


if aiohttp is not None:

    class _PinnedResolver(aiohttp.abc.AbstractResolver):
        """aiohttp's resolver, answering with the pinned addresses instead of looking the name up."""

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[aiohttp.abc.ResolveResult]:
            return [
                {
                    "hostname": host,
                    "host": address,
                    "port": port,
                    "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
                for address in _pinned_addresses(host)
            ]

        async def close(self) -> None:
            pass
