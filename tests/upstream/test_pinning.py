"""Override host names under `allowed_override_base_urls = ["*"]`: resolved before the check, every address
checked, and the connection made to exactly the checked addresses (no DNS rebinding), TLS still for the name.

Every resolver here is a fake that answers from a table, and every connection goes to loopback: no lookup and
no packet leaves the machine. Names such as `llm.example` are only ever answered by those fakes.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import anyio.abc
import anyio.streams.tls
import httpx
import pytest
import trustme

from adapter_critic import Config, create_app
from adapter_critic.http.app import build_app
from adapter_critic.service.compose import compose
from adapter_critic.upstream.pinning import PINNED, HostGuard, pinned_client, system_resolver
from adapter_critic.upstream.urlguard import IPAddress, address_problem

from ..conftest import UPSTREAM_URL, asgi_client, chat, make_config
from ..helpers import completion, read_request
from ..scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.anyio

COMPLETION = completion("pinned", model="api-model")


class FakeResolver:
    """Answers from a table, one answer per lookup in turn (the last one repeats); records every lookup."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append((host, port))
        turns = self.answers.get(host)
        if turns is None:
            raise OSError(-2, "Name or service not known")
        return turns[min(len(self.asked) - 1, len(turns) - 1)]


def star_config(**top: Any) -> Config:
    return make_config(allowed_override_base_urls=["*"], **top)


@contextlib.asynccontextmanager
async def app_with(
    config: Config, resolver: FakeResolver, upstream: ScriptedUpstream
) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network,
        asgi_client(create_app(config, http_client=network, resolver=resolver)) as client,
    ):
        yield client


# -- the check --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addresses", "shown"),
    [
        (["10.1.2.3"], "private"),
        (["192.168.0.7"], "private"),
        (["127.0.0.1"], "loopback"),
        (["::1"], "loopback"),
        (["::ffff:127.0.0.1"], "loopback"),
        (["fd00::5"], "private"),
        (["169.254.169.254"], "link-local"),
        (["fe80::1%eth0"], "link-local"),
        (["0.0.0.0"], "unspecified"),
        (["93.184.216.34", "10.0.0.8"], "private"),  # every address is checked, not just the first
        (["2606:2800:220:1::1", "::ffff:169.254.169.254"], "link-local"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_public_looking_name_that_resolves_to_a_local_address_is_refused(
    upstream: ScriptedUpstream, addresses: list[str], shown: str, stream: bool
) -> None:
    resolver = FakeResolver({"api.public-looking.example": [addresses]})
    url = "https://api.public-looking.example/v1"
    async with app_with(star_config(), resolver, upstream) as client:
        body = chat("m-direct", stream=stream, x_adapter_critic={"api_base_url": url})
        response = await client.post("/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "x_adapter_critic.api_base_url"
    assert shown in error["message"] and "resolves to" in error["message"]
    assert resolver.asked == [("api.public-looking.example", 443)]
    assert upstream.calls == []


async def test_a_name_that_does_not_resolve_is_a_400(upstream: ScriptedUpstream) -> None:
    resolver = FakeResolver({})
    async with app_with(star_config(), resolver, upstream) as client:
        overrides = {"critic_base_url": "http://nowhere.example:8080/v1", "critic_model": "m"}
        response = await client.post("/chat/completions", json=chat("m-critic", x_adapter_critic=overrides))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "x_adapter_critic.critic_base_url"
    assert "could not be resolved (Name or service not known)" in error["message"]
    assert resolver.asked == [("nowhere.example", 8080)]
    assert upstream.calls == []


async def test_a_name_whose_lookup_does_not_answer_is_a_400_after_connect_timeout_seconds(
    upstream: ScriptedUpstream,
) -> None:
    never = anyio.Event()

    async def silent(host: str, port: int) -> Sequence[str]:
        await never.wait()
        return []

    config = star_config(connect_timeout_seconds=0.05)
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream.app)) as network,
        asgi_client(create_app(config, http_client=network, resolver=silent)) as client,
    ):
        body = chat("m-direct", x_adapter_critic={"api_base_url": "http://slow-dns.example/v1"})
        response = await client.post("/chat/completions", json=body)
    assert response.status_code == 400, response.text
    assert "could not be resolved (no answer within 0.05 seconds)" in response.json()["error"]["message"]
    assert upstream.calls == []


async def test_configured_and_listed_urls_and_plain_requests_are_never_resolved(upstream: ScriptedUpstream) -> None:
    resolver = FakeResolver({})
    listed = "http://listed.example/v1"
    config = make_config(allowed_override_base_urls=["*", listed])
    async with app_with(config, resolver, upstream) as client:
        for overrides in (None, {"api_base_url": UPSTREAM_URL + "/"}, {"api_model": "other"}, {"api_base_url": listed}):
            extra = {} if overrides is None else {"x_adapter_critic": overrides}
            response = await client.post("/chat/completions", json=chat("m-direct", **extra))
            assert response.status_code == 200, response.text
    assert resolver.asked == []
    assert len(upstream.calls) == 4


# -- the connection ---------------------------------------------------------------------------------------------------


class Upstream:
    """A loopback HTTP/1.1 server answering COMPLETION; records each request's head."""

    def __init__(self) -> None:
        self.heads: list[dict[str, str]] = []
        self.server_names: list[str | None] = []

    async def handle(self, stream: anyio.abc.ByteStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError, ssl.SSLError):
            async with stream:
                headers, _ = await read_request(stream)
                self.heads.append(headers)
                payload = json.dumps(COMPLETION).encode()
                await stream.send(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
                )


@contextlib.asynccontextmanager
async def listening(
    upstream: Upstream, host: str, port: int = 0, tls: ssl.SSLContext | None = None
) -> AsyncIterator[int]:
    listener: anyio.abc.Listener[Any] = await anyio.create_tcp_listener(local_host=host, local_port=port)
    bound = listener.extra(anyio.abc.SocketAttribute.local_port)
    if tls is not None:
        listener = anyio.streams.tls.TLSListener(listener, tls, standard_compatible=False)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, upstream.handle)
        yield bound
        tg.cancel_scope.cancel()


def client() -> httpx.AsyncClient:
    return pinned_client(timeout=httpx.Timeout(5), limits=httpx.Limits(max_connections=4))


async def test_the_connection_goes_to_the_pinned_address_without_a_lookup(transport_kind: str) -> None:
    """127.0.0.2 refuses (nothing listens there), so the next pinned address is tried; the name is never looked
    up (it resolves nowhere), and the `Host` header keeps it."""
    upstream = Upstream()
    async with listening(upstream, "127.0.0.1") as port, client() as pinned:
        url = f"http://llm.example:{port}/v1/chat/completions"
        response = await pinned.post(url, json={}, extensions={PINNED: ("127.0.0.2", "127.0.0.1")})
    assert response.json() == COMPLETION
    assert upstream.heads[0]["host"] == f"llm.example:{port}"


async def test_a_request_without_pinned_addresses_is_never_connected(transport_kind: str) -> None:
    """The pinning client never looks a name up itself: a request that carries no checked addresses fails."""
    upstream = Upstream()
    async with listening(upstream, "127.0.0.1") as port, client() as pinned:
        with pytest.raises(httpx.ConnectError):
            await pinned.post(f"http://llm.example:{port}/v1", json={})
    assert upstream.heads == []


async def test_tls_keeps_the_host_name_for_sni_and_the_certificate(transport_kind: str) -> None:
    authority = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("llm.example").configure_cert(server_context)
    upstream = Upstream()
    server_context.sni_callback = lambda _sock, name, _ctx: upstream.server_names.append(name)  # type: ignore[assignment,func-returns-value]
    client_context = ssl.create_default_context()
    authority.configure_trust(client_context)
    async with (
        listening(upstream, "127.0.0.1", tls=server_context) as port,
        pinned_client(timeout=httpx.Timeout(5), limits=httpx.Limits(), verify=client_context) as pinned,
    ):
        response = await pinned.post(
            f"https://llm.example:{port}/v1/chat/completions", json={}, extensions={PINNED: ("127.0.0.1",)}
        )
        assert response.json() == COMPLETION
        # The certificate is for the name, not the address: a client checking it against 127.0.0.1 would fail.
        with pytest.raises(httpx.ConnectError):
            await pinned.post(f"https://127.0.0.1:{port}/v1", json={})
    assert upstream.server_names[0] == "llm.example"


@pytest.mark.parametrize("stream", [False, True])
async def test_the_app_connects_to_the_address_it_checked_not_a_later_answer(transport_kind: str, stream: bool) -> None:
    """DNS rebinding: the first lookup answers 127.0.0.2 (taken here as an internet address), every later one
    127.0.0.1 (refused). The request goes to 127.0.0.2, looked up once; nothing reaches 127.0.0.1, and nothing
    reaches the given client either (pinned calls always use the app's own pinning client)."""
    checked, rebound = Upstream(), Upstream()
    resolver = FakeResolver({"llm.example": [["127.0.0.2"], ["127.0.0.1"]]})

    def problem(address: IPAddress) -> str | None:
        return None if str(address) == "127.0.0.2" else address_problem(address)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"the given client was called for {request.url}")

    async with (
        listening(checked, "127.0.0.2") as port,
        listening(rebound, "127.0.0.1", port),
        httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as given,
    ):
        service = compose(star_config(), http_client=given, host_guard=HostGuard(resolver, problem))
        async with asgi_client(build_app(service)) as app:
            url = f"http://llm.example:{port}/v1"
            body = chat("m-direct", stream=stream, x_adapter_critic={"api_base_url": url})
            first = await app.post("/chat/completions", json=body)
            # The next request is checked anew: its lookup now answers 127.0.0.1, which is refused.
            second = await app.post("/chat/completions", json=body)
    assert first.status_code == 200, first.text
    assert "pinned" in first.text
    assert second.status_code == 400 and "resolves to 127.0.0.1" in second.json()["error"]["message"]
    assert resolver.asked == [("llm.example", port)] * 2
    assert [head["host"] for head in checked.heads] == [f"llm.example:{port}"]
    assert rebound.heads == []


async def test_the_system_resolver_answers_addresses_once_each() -> None:
    """A numeric host: getaddrinfo answers it without any lookup."""
    assert await system_resolver("127.0.0.1", 80) == ["127.0.0.1"]
    assert await system_resolver("::1", 443) == ["::1"]
