"""Override hardening: `allowed_override_base_urls = ["*"]` still refuses cloud-metadata hosts, this machine and its
networks (in every spelling a resolver accepts), other schemes, credentials in the URL and malformed hosts."""

from __future__ import annotations

import pytest

from adapter_critic import Config
from adapter_critic.errors import RequestError
from adapter_critic.pipeline.resolve import check_overrides
from adapter_critic.request.decode import Overrides
from adapter_critic.upstream.urlguard import ip_of, override_url_problem

from ..conftest import AppFactory, chat, make_config
from ..helpers import envelope
from ..scripted_upstream import ScriptedUpstream

pytestmark = pytest.mark.anyio


METADATA_URLS = [
    "http://169.254.169.254/latest/meta-data",
    "http://169.254.169.254.",
    "http://169.254.0.1:8080/v1",
    "https://169.254.255.255/v1",
    "http://2852039166/",  # 169.254.169.254 as one decimal number
    "http://0xA9FEA9FE/",  # hex
    "http://0xa9.0xfe.0xa9.0xfe/",
    "http://0251.0376.0251.0376/",  # octal
    "http://169.254.43518/",  # a.b.c form
    "http://169.16689662/",  # a.b form
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64
    "http://[2002:a9fe:a9fe::1]/",  # 6to4
    "http://[fe80::1]/v1",
    "http://[fe80::1%25eth0]/v1",
    "http://[febf:ffff::1]/v1",
    "http://[fd00:ec2::254]/latest",
    "http://100.100.100.200/latest/meta-data",
    "http://metadata.google.internal/computeMetadata/v1",
    "http://METADATA.Google.Internal./computeMetadata/v1",
    "http://metadata%2Egoogle%2Einternal/computeMetadata/v1",
    "http://metadata\u3002google\u3002internal/",  # ideographic full stops, which IDNA maps to dots
    "http://metadata/computeMetadata/v1",
    "http://instance-data/latest",
]


REFUSED_URLS = [
    *METADATA_URLS,
    "ftp://upstream.example/v1",
    "file:///etc/passwd",
    "gopher://upstream.example/",
    "ws://upstream.example/v1",
    "http://user:pass@upstream.example/v1",
    "http://user@upstream.example/v1",
    "http://evil.example\\@169.254.169.254/",  # parsers disagree on such hosts; userinfo is refused outright
    "http://169.254.169.254\\@evil.example/",
    "http:///v1",
    "http://99999999999/",  # numeric, but no address
    "http://1.2.3.4.5/",
    "http://09.1.1.1/",
    "http://example.123/",
    "/v1",
    "not a url",
]

# Addresses of this machine and its networks, in the spellings a resolver accepts, with the reason given.
LOCAL_ADDRESS_URLS = [
    ("http://127.0.0.1:8000/v1", "loopback"),
    ("http://127.1/v1", "loopback"),
    ("http://2130706433/v1", "loopback"),  # 127.0.0.1 as one decimal number
    ("http://0x7f000001/v1", "loopback"),
    ("http://localhost./v1", "loopback"),
    ("http://LocalHost:8000/v1", "loopback"),
    ("http://api.localhost/v1", "loopback"),
    ("http://localhost.example/v1", None),  # a name: judged by the addresses it resolves to (see pinning)
    ("http://[::1]:8000/v1", "loopback"),
    ("http://[::ffff:127.0.0.1]/v1", "loopback"),  # IPv4-mapped
    ("http://[::ffff:7f00:1]/v1", "loopback"),
    ("http://[::127.0.0.1]/v1", "loopback"),  # IPv4-compatible
    ("http://[64:ff9b::7f00:1]/v1", "loopback"),  # NAT64
    ("http://[2002:7f00:1::1]/v1", "loopback"),  # 6to4
    ("http://0.0.0.0:8000/v1", "unspecified"),
    ("http://0/v1", "unspecified"),
    ("http://[::]/v1", "unspecified"),
    ("http://[::ffff:0.0.0.0]/v1", "unspecified"),
    ("http://10.0.0.5:8000/v1", "private"),
    ("http://172.16.0.1/v1", "private"),
    ("http://172.31.255.255/v1", "private"),
    ("http://192.168.1.1/v1", "private"),
    ("http://0xc0a80101/v1", "private"),
    ("http://[::ffff:10.1.2.3]/v1", "private"),
    ("http://[::ffff:c0a8:101]/v1", "private"),
    ("http://100.64.0.1/v1", "private"),
    ("http://[fc00::1]/v1", "private"),
    ("http://[fd12:3456::1]/v1", "private"),
    ("http://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/v1", "private"),  # Teredo, client 10.0.0.1
    ("http://169.254.169.254/v1", "link-local"),
    ("http://[fe80::1%25eth0]/v1", "link-local"),
    ("http://[::ffff:169.254.169.254]/v1", "link-local"),
    ("http://224.0.0.1/v1", "multicast"),
    ("http://255.255.255.255/v1", "multicast"),
    ("http://[ff02::1]/v1", "multicast"),
]


@pytest.mark.parametrize(("url", "reason"), LOCAL_ADDRESS_URLS)
def test_star_never_reaches_this_machine_or_its_networks(url: str, reason: str | None) -> None:
    problem = override_url_problem(url)
    if reason is None:
        assert problem is None
        return
    assert problem is not None and reason in problem
    with pytest.raises(RequestError) as info:
        check_overrides(star_config(), Overrides(api_base_url=url))
    assert info.value.status_code == 400 and reason in info.value.message
    assert "list the URL explicitly" in info.value.message
    check_overrides(star_config(url), Overrides(api_base_url=url))  # listed explicitly: allowed
    check_overrides(make_config(allowed_override_base_urls=[url]), Overrides(api_base_url=url))


ALLOWED_URLS = [
    "http://upstream.example/v1",
    "https://api.openai.com/v1",
    "HTTPS://API.OPENAI.COM/v1",
    "http://8.8.8.8:8000/v1",
    "http://[2606:4700::1111]/v1",
    "http://[::ffff:8.8.8.8]/v1",
    "http://100.63.255.255/v1",
    "http://172.32.0.1/v1",
    "http://169.255.0.1/v1",
    "http://169.253.255.255/v1",
    "http://metadata.example.com/v1",
    "http://my-metadata/v1",
]


def star_config(*extra: str) -> Config:
    return make_config(allowed_override_base_urls=["*", *extra])


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_star_refuses_metadata_hosts_other_schemes_and_userinfo(url: str) -> None:
    with pytest.raises(Exception) as info:
        check_overrides(star_config(), Overrides(api_base_url=url))
    error = info.value
    assert getattr(error, "status_code", None) == 400, error
    assert getattr(error, "param", None) == "x_adapter_critic.api_base_url"
    assert ":pass@" not in str(error)  # credentials in the URL are not echoed


@pytest.mark.parametrize("url", ALLOWED_URLS)
def test_star_still_allows_ordinary_hosts(url: str) -> None:
    check_overrides(star_config(), Overrides(api_base_url=url, critic_base_url=url))


@pytest.mark.parametrize("url", METADATA_URLS[:4])
def test_metadata_hosts_can_be_listed_explicitly(url: str) -> None:
    check_overrides(star_config(url), Overrides(api_base_url=url))


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("169.16689662", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("example.com", None),
    ],
)
def test_ip_spellings(host: str, address: str | None) -> None:
    found = ip_of(host)
    assert (str(found) if found is not None else None) == address


async def test_refused_override_is_a_400_through_the_app(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve(star_config()) as client:
        for url in ("http://169.254.169.254/v1", "http://u:sk-in-url-secret@up.example/v1"):
            response = await client.post(
                "/chat/completions", json=chat("m-direct", x_adapter_critic={"api_base_url": url})
            )
            error = envelope(response, 400)
            assert error["param"] == "x_adapter_critic.api_base_url"
            assert "sk-in-url-secret" not in response.text
    assert upstream.calls == []


def test_override_url_problem_names_the_reason() -> None:
    assert override_url_problem("http://169.254.169.254/") == "points at a link-local or cloud-metadata address"
    assert override_url_problem("http://metadata.google.internal/") == "points at a cloud-metadata host"
    assert override_url_problem("ftp://x/") == "does not use http or https"
    assert override_url_problem("http://a:b@x/") == "contains credentials (user:password@)"
    assert override_url_problem("https://api.openai.com/v1") is None


# URLs httpx parses but no upstream call can use: IDNA labels that do not decode, labels DNS refuses, no port.
INVALID_URLS = [
    "http://xn--/",
    "http://xn--a/",  # decodes to a code point IDNA does not allow
    "https://xn--ls8h.example/v1",  # an emoji: not allowed by IDNA 2008
    f"http://{'a' * 64}.com/v1",  # a label over 63 characters
    f"http://{'a.' * 127}com/v1",  # a name over 253 characters
    "http://a..b/v1",  # an empty label
    "http://.upstream.example/v1",
    "//xn--/v1",
    "http://upstream.example:65536/v1",
]

OVERRIDE_URL_FIELDS = ["api_base_url", "adapter_base_url", "critic_base_url"]


@pytest.mark.parametrize("allowlist", [[], ["*"], "listed"])
@pytest.mark.parametrize("url", INVALID_URLS)
def test_malformed_host_is_not_a_valid_url_whatever_the_allowlist(url: str, allowlist: list[str] | str) -> None:
    config = make_config(allowed_override_base_urls=[url] if allowlist == "listed" else allowlist)
    for field in OVERRIDE_URL_FIELDS:
        with pytest.raises(RequestError) as info:
            check_overrides(config, Overrides(**{field: url}))
        assert info.value.status_code == 400
        assert info.value.param == f"x_adapter_critic.{field}"
        assert info.value.message.endswith("is not a valid URL.")
    assert override_url_problem(url) == "is not a valid URL"


def test_valid_hosts_near_the_limits_are_allowed() -> None:
    for url in (f"http://{'a' * 63}.com/v1", f"http://{'a.' * 125}com/v1", "http://xn--bcher-kva.example./v1"):
        check_overrides(star_config(), Overrides(api_base_url=url))


@pytest.mark.parametrize("model", ["m-direct", "m-adapter", "m-critic"])
async def test_malformed_override_host_is_a_400_through_the_app(
    serve: AppFactory, upstream: ScriptedUpstream, model: str
) -> None:
    async with serve(star_config()) as client:
        for url in INVALID_URLS:
            for field in OVERRIDE_URL_FIELDS:
                overrides = {field: url, field.replace("base_url", "model"): "some-model"}
                response = await client.post("/chat/completions", json=chat(model, x_adapter_critic=overrides))
                error = envelope(response, 400)
                assert error["param"] == f"x_adapter_critic.{field}"
                assert "is not a valid URL" in error["message"]
    assert upstream.calls == []
