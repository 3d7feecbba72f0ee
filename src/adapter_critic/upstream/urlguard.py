"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What `allowed_override_base_urls = ["*"]` still refuses in a request's `*_base_url` override.

"*" lets a request choose any upstream on the internet, but not:

- a scheme other than `http`/`https`;
- userinfo (`http://user:pass@host`): credentials in a URL end up in logs and messages, and `\\@`-style
  tricks are where URL parsers disagree about the host;
- an address of this machine or its networks (`address_problem`): unspecified (0.0.0.0/8, ::), loopback
  (127.0.0.0/8, ::1), private (RFC 1918, carrier-grade NAT 100.64.0.0/10, unique local fc00::/7, site-local),
  link-local and cloud metadata, where the machine's own credentials are served (169.254.0.0/16, fe80::/10,
  fd00:ec2::254, 100.100.100.200, `metadata.google.internal` and its aliases), multicast, reserved and
  broadcast — in every spelling a resolver accepts: decimal, hex and octal IPv4 (`2852039166`, `0xa9fea9fe`,
  `0251.0376.0251.0376`, `169.254.43518`), IPv4 inside IPv6 (`::ffff:127.0.0.1`, IPv4-compatible, NAT64,
  6to4, Teredo), a trailing dot, percent-encoding, a zone id.

An operator who really wants one of these lists it explicitly. The URL is parsed by `httpx.URL`, the
parser of the client that makes the call, so the host checked is the host called. A host *name* is checked
here for its form only; every address it resolves to is checked by `upstream.pinning`, which also makes the
connection go to exactly the addresses checked.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}
)
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")})
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

# A label a resolver may read as (part of) an IPv4 address: decimal, octal (leading 0) or hex (0x).
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")


def parse_url(url: str) -> httpx.URL | None:
    """`url` as the HTTP client parses it, or None if it is no valid URL: httpx refuses it, or its host is no
    host name the client can call. Never raises.

    httpx checks a host lazily: an IDNA label (`xn--...`) is only decoded when `.host` is read, which raises
    `idna.IDNAError` for a malformed one (`xn--`, `xn--a`); the host is only encoded to ASCII when sent (an
    IPv6 zone id may not be ASCII); and a label over 63 characters or an empty one (`a..b`) is only refused
    by the resolver's IDNA codec, with a `UnicodeError`, at connect time. A port over 65535 fails there too.
    A relative URL (a path, no host) is valid here: whether it may be used is decided elsewhere."""
    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018  # decodes the IDNA labels
        raw_host = parsed.raw_host  # the host as sent: not ASCII for an IPv6 zone id such as `%25\x80`
    except (httpx.InvalidURL, ValueError):  # idna.IDNAError and UnicodeError are ValueErrors
        return None
    if parsed.port is not None and parsed.port > 65535:  # httpx takes any number; the socket refuses it
        return None
    if raw_host and b":" not in raw_host:  # a name or an IPv4 address, not an IPv6 literal
        name = raw_host.removesuffix(b".")  # one trailing dot: the root
        if len(name) > 253 or not all(0 < len(label) <= 63 for label in name.split(b".")):
            return None
    return parsed


def override_url_problem(url: str) -> str | None:
    """Why a `*_base_url` override may not be allowed by "*" (a phrase to follow the URL), or None if it may."""
    parsed = parse_url(url)
    if parsed is None:
        return "is not a valid URL"
    if parsed.scheme not in ("http", "https"):
        return "does not use http or https"
    if parsed.userinfo:
        return "contains credentials (user:password@)"
    host = urllib.parse.unquote(parsed.host).lower().rstrip(".")
    if not host:
        return "has no host"
    if host in METADATA_HOSTS:
        return "points at a cloud-metadata host"
    if host == "localhost" or host.endswith(".localhost"):  # always this host (RFC 6761), whatever DNS says
        return _LOOPBACK
    try:
        address = ip_of(host)
    except ValueError:
        return "has a host that is neither a name nor a valid IP address"
    return address_problem(address) if address is not None else None


def needs_resolution(url: str) -> bool:
    """Whether an override URL that `override_url_problem` let through names its host (to be resolved and its
    addresses checked) rather than giving an IP address."""
    parsed = parse_url(url)
    return parsed is not None and ip_of(urllib.parse.unquote(parsed.host).lower().rstrip(".")) is None


def ip_of(host: str) -> IPAddress | None:
    """The address `host` stands for if it is an IP literal in any spelling a resolver accepts, else None
    (a name). Raises ValueError for a host that looks numeric but is no valid address."""
    try:
        return ipaddress.ip_address(host)  # dotted-quad IPv4, IPv6 (with a zone id)
    except ValueError:
        pass
    labels = host.split(".")
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None  # a name (a numeric last label means an address, or nothing: WHATWG URL, inet_aton)
    if len(labels) > 4 or not all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        raise ValueError(host)
    numbers = [_number(label) for label in labels]
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(host)
    value = last
    for i, n in enumerate(leading):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


LINK_LOCAL = "points at a link-local or cloud-metadata address"
_UNSPECIFIED = "points at an unspecified address (this host)"
_LOOPBACK = "points at a loopback address (this host)"
_PRIVATE = "points at a private-network address"
_NOT_UNICAST = "points at a multicast, reserved or broadcast address"
_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(network), problem)
    for network, problem in (
        ("0.0.0.0/8", _UNSPECIFIED),
        ("127.0.0.0/8", _LOOPBACK),
        ("10.0.0.0/8", _PRIVATE),
        ("172.16.0.0/12", _PRIVATE),
        ("192.168.0.0/16", _PRIVATE),
        ("100.64.0.0/10", _PRIVATE),  # carrier-grade NAT (RFC 6598): private networks, VPN meshes
        ("192.0.0.0/24", _PRIVATE),  # IETF protocol assignments (RFC 6890): not on the internet
        ("198.18.0.0/15", _PRIVATE),  # benchmarking (RFC 2544): lab networks
        ("169.254.0.0/16", LINK_LOCAL),
        ("224.0.0.0/4", _NOT_UNICAST),
        ("240.0.0.0/4", _NOT_UNICAST),  # reserved, and 255.255.255.255
        ("::/128", _UNSPECIFIED),
        ("::1/128", _LOOPBACK),
        ("fc00::/7", _PRIVATE),  # unique local
        ("fec0::/10", _PRIVATE),  # site-local (deprecated, still routed on some networks)
        ("64:ff9b:1::/48", _PRIVATE),  # local-use NAT64 (RFC 8215)
        ("fe80::/10", LINK_LOCAL),
        ("ff00::/8", _NOT_UNICAST),
    )
)


def address_problem(address: IPAddress) -> str | None:
    """Why `"*"` does not cover an address (a phrase to follow the URL), or None for an internet address.
    An IPv6 address that carries an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo) is judged by both."""
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(int(address))  # drop a zone id
        for inner in _embedded_ipv4(address):
            problem = address_problem(inner)
            if problem is not None:
                return problem
    if address in METADATA_ADDRESSES:
        return LINK_LOCAL
    for network, problem in _NETWORKS:
        if address in network:
            return problem
    return None


def is_metadata_address(address: IPAddress) -> bool:
    """Link-local or a known metadata address, also when an IPv6 address carries an IPv4 one inside."""
    return address_problem(address) == LINK_LOCAL


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found = [inner for inner in (address.ipv4_mapped, address.sixtofour) if inner is not None]
    if address.teredo is not None:
        found.append(address.teredo[1])  # the client's address
    if address in _NAT64 or 1 < int(address) < 2**32:  # NAT64, IPv4-compatible
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _number(label: str) -> int:
    if label.startswith("0x"):
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        return int(label, 8)  # ValueError for 8 and 9, as a resolver refuses them
    return int(label)
