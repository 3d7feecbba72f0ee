"""Property-based tests (hypothesis) with hostile input, issue 5.

- the request decoder: arbitrary bytes and JSON, valid requests with a wrong value at any path, deep nesting, huge
  strings, invalid UTF-8, NaN/Infinity literals, duplicate keys: a `ChatRequest` or a `RequestError`, nothing else;
- override checks and resolution: a `RequestError` or a plan that sends no key anywhere it may not go;
- the SEARCH/REPLACE parser and applier: a text or an `EditError`, and well-formed edits do what they say;
- the whole app through ASGI (`create_app`, and the middleware with in-process stages), with a well-behaved and with
  a hostile upstream: a §7 envelope or a valid completion (or event stream) — never a 500, never a hang.

How many examples: the hypothesis profile in HYPOTHESIS_PROFILE, `ci` (the default, small enough for every run) or
`dev` (for a run by hand: `HYPOTHESIS_PROFILE=dev pytest tests/test_fuzz.py --hypothesis-show-statistics`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapter_critic import AdapterCriticMiddleware, Config, create_app
from adapter_critic.config import normalize_url
from adapter_critic.errors import RequestError
from adapter_critic.pipeline.resolve import check_overrides, resolve
from adapter_critic.request.decode import ChatRequest, Overrides, decode_request
from adapter_critic.upstream.urlguard import is_metadata_address, override_url_problem
from adapter_critic.workflows.edits import Edit, EditError, apply_edits, is_lgtm, parse_edits, review

from .conftest import OTHER_URL, UPSTREAM_URL, asgi_client, make_config
from .helpers import completion, nested

settings.register_profile(
    "ci", max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev",
    max_examples=1500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

pytestmark = pytest.mark.anyio

SERVED = ["m-direct", "m-adapter", "m-critic"]
ROLES = ["system", "developer", "user", "assistant", "tool"]
OVERRIDE_FIELDS = list(Overrides.fields())
URL_FIELDS = [name for name in OVERRIDE_FIELDS if name.endswith("_base_url")]

# -- strategies --------------------------------------------------------------------------------------------------------

leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.sampled_from(["", "lgtm", "m-direct", "user", "http://169.254.169.254/v1", UPSTREAM_URL, "*"])
)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

content = st.one_of(
    st.text(max_size=40),
    st.none(),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)}), max_size=3),
    st.integers(0, 300_000).map(lambda n: "x" * n),  # huge strings
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(ROLES), "content": content},
        optional={"tool_calls": st.lists(json_values, max_size=2), "name": st.text(max_size=5), "extra": json_values},
    ),
    min_size=1,
    max_size=5,
)
urls = st.sampled_from(
    [
        UPSTREAM_URL,
        OTHER_URL,
        "http://anything.example/v1",
        "http://169.254.169.254/latest",
        "http://2852039166/",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/",
        "http://u:p@x.example/",
        "ftp://x/",
        "/v1",
        "",
    ]
) | st.text(max_size=30)
overrides = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["direct", "adapter", "critic", "bogus"]),
        "api_model": st.text(max_size=8),
        "api_base_url": urls,
        "adapter_model": st.text(max_size=8),
        "adapter_base_url": urls,
        "critic_model": st.text(max_size=8),
        "critic_base_url": urls,
        "max_adapter_retries": st.integers(-2, 7),
    },
)
requests = st.fixed_dictionaries(
    {"model": st.sampled_from([*SERVED, "unknown-model", ""]), "messages": messages},
    optional={
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "temperature": st.floats(0, 2),
        "tools": json_values,
        "x_adapter_critic": overrides,
        "extra_body": st.fixed_dictionaries({}, optional={"x_adapter_critic": overrides, "top_k": st.integers()}),
        "vendor_field": json_values,
    },
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (the root excluded)."""
    found: list[tuple[Any, ...]] = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in children:
        found.append((*prefix, key))
        found.extend(paths(child, (*prefix, key)))
    return found


@st.composite
def wrong_at_some_path(draw: st.DrawFn) -> Any:
    """A valid-looking request with one value, anywhere in it, replaced by an arbitrary JSON value."""
    request = draw(requests)
    where = draw(st.sampled_from(paths(request)))
    parent = request
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = draw(json_values)
    return request


@st.composite
def hostile_bytes(draw: st.DrawFn) -> bytes:
    """A body as raw bytes: mutilated JSON, in all the ways a decoder can be made to trip."""
    base = json.dumps(draw(requests)).encode()
    kind = draw(
        st.sampled_from(["binary", "invalid-utf8", "nan", "duplicate", "deep", "truncated", "deep-field", "escapes"])
    )
    if kind == "binary":
        return draw(st.binary(max_size=200))
    if kind == "invalid-utf8":
        at = draw(st.integers(0, len(base)))
        return (
            base[:at]
            + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]))
            + base[at:]
        )
    if kind == "nan":
        literal = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"nan", b"1e999", b"-0", b"1E400"]))
        return base[:-1] + b', "temperature": ' + literal + b"}"
    if kind == "duplicate":
        key = draw(st.sampled_from([b"model", b"messages", b"stream", b"x_adapter_critic"]))
        return base[:-1] + b', "' + key + b'": ' + json.dumps(draw(json_values)).encode() + b"}"
    if kind == "deep":
        depth = draw(st.integers(1, 120_000))
        return nested(depth).encode() if draw(st.booleans()) else ("{" + '"a":{' * depth + "}" * depth + "}").encode()
    if kind == "deep-field":
        depth = draw(st.integers(500, 120_000))
        field = draw(st.sampled_from(["tools", "messages", "x_adapter_critic", "extra_body", "stream_options"]))
        return base[:-1] + f', "{field}": {nested(depth)}'.encode() + b"}"
    if kind == "escapes":
        text = draw(st.sampled_from(["\\ud800", "\\udfff", "\\u0000", "\\uZZZZ", "\\x41", "\\", "\\\\u12"]))
        return base[:-1] + b', "model": "' + text.encode() + b'"}'
    at = draw(st.integers(0, len(base)))
    return base[:at]


bodies = st.one_of(
    requests.map(lambda r: json.dumps(r).encode()),
    wrong_at_some_path().map(lambda r: json.dumps(r).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    hostile_bytes(),
)

# -- the request decoder -----------------------------------------------------------------------------------------------


@given(body=bodies)
def test_decoder_answers_a_request_or_a_request_error(body: bytes) -> None:
    try:
        request = decode_request(body, max_messages=4)
    except RequestError as exc:
        assert exc.status_code == 400
        assert exc.message
        return
    assert isinstance(request, ChatRequest)
    assert request.model and 1 <= len(request.messages) == len(request.raw_messages) <= 4
    assert not {"model", "messages", "x_adapter_critic", "extra_body"} & set(request.options)


# -- override checks and resolution ------------------------------------------------------------------------------------

CONFIGS = {
    "default": make_config(),
    "star": make_config(allowed_override_base_urls=["*"]),
    "listed": make_config(allowed_override_base_urls=["http://169.254.169.254/latest", "http://anything.example/v1"]),
}


@given(raw=overrides, model=st.sampled_from([*SERVED, "unknown"]), config_name=st.sampled_from(sorted(CONFIGS)))
def test_resolution_never_sends_a_key_where_it_may_not_go(raw: dict[str, Any], model: str, config_name: str) -> None:
    config = CONFIGS[config_name]
    try:
        request = decode_request(
            json.dumps({"model": model, "messages": [{"role": "user"}], "x_adapter_critic": raw}).encode()
        )
        check_overrides(config, request.overrides)
        plan = resolve(config, request.model, request.overrides)
    except RequestError as exc:
        assert exc.status_code in (400, 404)
        return
    configured = {t.url for t in config.targets()}
    listed = {normalize_url(u) for u in config.allowed_override_base_urls}
    for target in (plan.api, *plan.targets.values()):
        if target is None:
            continue
        url = target.base_url
        assert url in configured or url in listed or ("*" in listed and override_url_problem(url) is None), url
        # Credentials are bound to URLs: a key only ever goes to a URL it is configured for.
        assert (target.key_env is not None) == (url in configured)


def spellings(address: int) -> st.SearchStrategy[str]:
    a, b, c, d = address.to_bytes(4, "big")

    def part(n: int) -> st.SearchStrategy[str]:
        return st.sampled_from([str(n), hex(n), f"0{n:o}" if n else "0", hex(n).upper().replace("X", "x")])

    return st.one_of(
        st.tuples(part(a), part(b), part(c), part(d)).map(".".join),
        st.tuples(part(a), part(b), part(c * 256 + d)).map(".".join),
        st.tuples(part(a), part(b * 65536 + c * 256 + d)).map(".".join),
        part(address),
        st.just(f"[::ffff:{a}.{b}.{c}.{d}]"),
    )


@given(data=st.data(), low=st.integers(0, 65535), trailing_dot=st.booleans(), path=st.sampled_from(["", "/", "/v1"]))
def test_every_spelling_of_a_link_local_address_is_refused(
    data: st.DataObject, low: int, trailing_dot: bool, path: str
) -> None:
    host = data.draw(spellings((169 << 24) | (254 << 16) | low))
    if trailing_dot and not host.startswith("["):
        host += "."
    assert override_url_problem(f"http://{host}{path}") is not None


@given(url=st.text(max_size=60) | st.from_regex(r"https?://[\w.\[\]:%@\\-]{0,30}(/[\w]*)?", fullmatch=True))
def test_url_guard_never_raises_and_never_lets_metadata_through(url: str) -> None:
    problem = override_url_problem(url)
    if problem is None:
        parsed = httpx.URL(url)
        assert parsed.scheme in ("http", "https") and not parsed.userinfo and parsed.host
        assert parsed.host.rstrip(".").lower() not in {"metadata.google.internal", "metadata"}
        with contextlib.suppress(ValueError):
            import ipaddress

            assert not is_metadata_address(ipaddress.ip_address(parsed.host))


# Hosts at the edges of what URL parsers, IDNA and DNS accept: punycode that does or does not decode, empty and
# over-long labels, percent-encoding, IPv6 literals with zone ids, numeric spellings.
host_labels = st.one_of(
    st.sampled_from(
        [
            *("", "a", "xn--", "xn--a", "xn--ls8h", "xn--bcher-kva", "XN--BCHER-KVA", "xn---", "xn--zz-", "-a-"),
            *("a_b", "a" * 63, "a" * 64, "%41", "%", "%zz", "%00", "%2e", "%E2%82%AC", "0x7f", "0251", "256"),
            *("bücher", "\u3002"),
        ]
    ),
    st.text(st.sampled_from("abxn-09.%"), max_size=70),
    st.text(max_size=6),
)
ipv6_hosts = st.builds(
    "[{}{}]".format,
    st.sampled_from(["::1", "fe80::1", "fd00:ec2::254", "::ffff:169.254.169.254", "1::2::3", "", "v1.x"]),
    st.sampled_from(["", "%25eth0", "%eth0", "%", "%25", "%25%", "%25xn--"]) | st.text(max_size=4).map("%25{}".format),
)
hosts = st.lists(host_labels, min_size=1, max_size=130).map(".".join) | ipv6_hosts
hostile_urls = st.one_of(
    st.builds(
        "{}://{}{}{}{}".format,
        st.sampled_from(["http", "https", "HTTP", "ftp", ""]),
        st.sampled_from(["", "u:p@", "@", "a\\@"]),
        hosts,
        st.sampled_from(["", ":80", ":0", ":65536", ":x", ":"]),
        st.sampled_from(["", "/", "/v1", "/v1/", "?q", "#f", "/%zz"]),
    ),
    st.text(max_size=80),
    st.text(st.characters(codec="ascii"), max_size=40).map("http://{}".format),
)


@given(url=hostile_urls, allowlist=st.sampled_from([*sorted(CONFIGS), "itself"]), field=st.sampled_from(URL_FIELDS))
@example(url="http://xn--/", allowlist="star", field="api_base_url")
@example(url=f"http://{'a' * 64}.com/v1", allowlist="star", field="critic_base_url")
@example(url="http://xn--a/", allowlist="itself", field="adapter_base_url")
@example(url="http://[::1%25\x80]/", allowlist="star", field="adapter_base_url")
def test_override_url_check_is_total(url: str, allowlist: str, field: str) -> None:
    """Whatever the string and the allowlist (`itself`: the URL is listed), the URL check answers with a
    RequestError (400, naming the field) or lets the URL through, and a URL it lets through has a host the
    resolver's IDNA codec can encode (so the call cannot fail on it with a UnicodeError)."""
    config = make_config(allowed_override_base_urls=[url]) if allowlist == "itself" else CONFIGS[allowlist]
    assert isinstance(override_url_problem(url), str | None)
    try:
        check_overrides(config, Overrides(**{field: url}))
    except RequestError as exc:
        assert exc.status_code == 400
        assert exc.param == f"x_adapter_critic.{field}"
        return
    normalized = normalize_url(url)
    if normalized in {t.url for t in config.targets()}:
        return
    parsed = httpx.URL(normalized)
    assert parsed.host is not None  # IDNA labels decode
    if b":" not in parsed.raw_host:  # a name or an IPv4 address, not an IPv6 literal
        parsed.raw_host.decode("ascii").encode("idna")


# -- SEARCH/REPLACE ----------------------------------------------------------------------------------------------------

marker_lines = st.sampled_from(
    [
        "<<<<<<< SEARCH",
        "<<<<<SEARCH",
        "=======",
        "=====",
        ">>>>>>> REPLACE",
        ">>>>>>>>> REPLACE",
        "```",
        "lgtm",
        "",
        " ",
    ]
)
replies = st.lists(marker_lines | st.text(max_size=30), max_size=30).map("\n".join) | st.text(max_size=200)


@given(draft=st.text(max_size=300), reply=replies, crlf=st.booleans())
def test_review_answers_a_text_or_an_edit_error(draft: str, reply: str, crlf: bool) -> None:
    if crlf:
        reply = reply.replace("\n", "\r\n")
    try:
        result = review(draft, reply)
    except EditError as exc:
        assert str(exc)
    else:
        assert isinstance(result, str)
        if is_lgtm(reply):
            assert result == draft


@given(
    data=st.data(),
    lines=st.lists(st.text(alphabet=st.characters(exclude_characters="\r\n"), max_size=20), min_size=1, max_size=20),
)
def test_well_formed_edits_replace_the_first_occurrence(data: st.DataObject, lines: list[str]) -> None:
    draft = "\n".join(lines)
    start = data.draw(st.integers(0, len(draft)))
    search = draft[start : start + data.draw(st.integers(1, 40))]
    if not search.strip() or search.startswith(("\n", " ")) or search.endswith(("\n", " ")):
        return  # the line-matching rules (whitespace) are tested in test_edits.py
    replace = data.draw(st.text(alphabet=st.characters(exclude_characters="\r\n"), max_size=20))
    reply = f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"
    edits = parse_edits(reply)
    assert edits == [Edit(search, replace)]
    if replace:
        assert apply_edits(draft, edits) == draft.replace(search, replace, 1)


# -- the whole app -----------------------------------------------------------------------------------------------------


SSE = (
    b'data: {"choices": [{"index": 0, "delta": {"content": "lgtm"}, "finish_reason": null}]}\n\n'
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
)


def good_upstream(request: httpx.Request) -> httpx.Response:
    """Answers every call without parsing it (Python's own json would choke on what some requests forward)."""
    if b'"stream":true' in request.content:
        return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, json=completion("lgtm"))


# Hostile upstreams fail every attempt the same way: no need to retry them (where the server retries at all).
NO_RETRIES: dict[str, Any] = {"retries": 0} if "retries" in Config.__struct_fields__ else {}
FUZZ_CONFIG = make_config(allowed_override_base_urls=["*"], max_messages=4, timeout_seconds=5, **NO_RETRIES)


@contextlib.asynccontextmanager
async def fuzzed_app(upstream: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(upstream)) as network,
        asgi_client(create_app(FUZZ_CONFIG, http_client=network)) as client,
    ):
        yield client


def assert_answer(response: httpx.Response) -> None:
    """A §7 envelope (never a 500), a chat completion, or a complete event stream."""
    assert response.status_code != 500, response.text
    if response.status_code != 200:
        assert 400 <= response.status_code < 600
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert isinstance(body["error"]["message"], str) and body["error"]["type"] != "server_error"
        return
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [line[6:] for line in response.text.split("\n\n") if line.startswith("data: ")]
        assert events, response.text
        last = events[-1]
        if last != "[DONE]":  # a stream that failed after it started ends with one error event
            error = json.loads(last)["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["type"] != "server_error"
        for payload in events[:-1]:
            assert json.loads(payload)["object"] == "chat.completion.chunk"
        return
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"] == body["adapter_critic"]["tokens"]["total"]


@given(body=bodies)
async def test_app_never_answers_500_or_hangs(body: bytes) -> None:
    async with fuzzed_app(good_upstream) as client:
        with anyio.fail_after(20):
            response = await client.post("/chat/completions", content=body)
    assert_answer(response)


upstream_bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=100),
    st.sampled_from(
        [
            json.dumps(completion("lgtm")).encode(),
            json.dumps({"error": {"message": "nope"}}).encode(),
            ('{"choices": [{"message": {"content": "x", "tool_calls": ' + nested(50_000) + "}}]}").encode(),
            b'{"choices": [{"message": {"content": "\xff"}}]}',
            b'{"choices": [{"delta": {"content": "\xff"}}]}',  # the same as a stream's chunks
            ('{"choices": [{"delta": {"content": "x"}, "logprobs": ' + nested(50_000) + "}]}").encode(),
            b'{"choices": [{"delta": {"content": "x"}, "finish_reason": "stop"}]}',
            b'{"choices": [{"message": {"content": "x"}, "finish_reason": 5}]}',
            b'{"choices": [], "usage": {"prompt_tokens": -1}}',
        ]
    ),
    st.builds(lambda v: json.dumps({"choices": [{"message": v}]}).encode(), json_values),
)


@given(
    request=requests,
    status=st.sampled_from([200, 200, 200, 201, 204, 301, 400, 401, 404, 413, 422, 429, 500, 502, 503]),
    reply=upstream_bodies,
    content_type=st.sampled_from(["application/json", "text/event-stream", "text/html"]),
)
async def test_app_never_answers_500_to_a_hostile_upstream(
    request: dict[str, Any], status: int, reply: bytes, content_type: str
) -> None:
    def upstream(call: httpx.Request) -> httpx.Response:
        if content_type == "text/event-stream":
            return httpx.Response(
                status, content=b"data: " + reply.replace(b"\n", b" ") + b"\n\n", headers={"content-type": content_type}
            )
        return httpx.Response(status, content=reply, headers={"content-type": content_type})

    async with fuzzed_app(upstream) as client:
        with anyio.fail_after(20):
            response = await client.post("/chat/completions", content=json.dumps(request).encode())
    assert_answer(response)


def local_model() -> Starlette:
    async def chat(request: Request) -> Response:
        raw = await request.body()
        if b'"stream":true' in raw:
            return Response(SSE, media_type="text/event-stream")
        if b'"model":"local-base"' in raw or b'"model":"reviewer"' in raw:
            return JSONResponse(completion("lgtm"))
        return JSONResponse({"wrapped": True})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


MIDDLEWARE_CONFIG = Config.from_dict(
    {
        "max_messages": 4,
        **NO_RETRIES,
        "served_models": {
            "m-direct": {"mode": "direct", "api": {"model": "local-base", "base_url": "/v1"}},
            "m-adapter": {
                "mode": "adapter",
                "api": {"model": "local-base", "base_url": "/v1"},
                "adapter": {"model": "reviewer", "base_url": "/v1"},
            },
            "m-critic": {"mode": "critic", "api": {"model": "local-base", "base_url": "/v1"}},
        },
    }
)


@given(body=bodies)
async def test_middleware_never_answers_500_or_hangs(body: bytes) -> None:
    async with asgi_client(AdapterCriticMiddleware(local_model(), config=MIDDLEWARE_CONFIG)) as client:
        with anyio.fail_after(20):
            response = await client.post("/v1/chat/completions", content=body)
    if response.headers["content-type"] == "application/json" and response.json() == {"wrapped": True}:
        return  # not a served model: the wrapped app answered
    assert_answer(response)
