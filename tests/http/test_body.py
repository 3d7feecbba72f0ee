"""`max_body_bytes` on request bodies through real uvicorn, over raw sockets: a chunked body is counted while it is read
and refused before it ends, a declared length before any body is read."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from ..conftest import run_app
from ..helpers import direct_toml


@pytest.fixture(scope="module")
def small_limit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("limits") / "limits.toml"
    with run_app(path, "max_body_bytes = 4096\n" + direct_toml("http://127.0.0.1:9/v1")) as (url, _):
        yield url


def raw_exchange(url: str, request: bytes) -> tuple[int, bytes]:
    """Send `request` as is and read one response; the socket timeout only guards against a hang."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=15) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        assert length is not None, head
        while len(body) < int(length.group(1)):
            chunk = sock.recv(65536)
            assert chunk
            body += chunk
    return int(head.split()[1]), body


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)


HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"


def test_chunked_body_over_the_limit_is_refused_before_it_ends(small_limit_server: str) -> None:
    # Two 3 KiB chunks and no terminating chunk: the body never ends, so only a server that counts while it
    # reads can answer — one that buffers the whole body first would wait forever.
    request = HEAD + b"transfer-encoding: chunked\r\n\r\n" + chunked(b" " * 3072, b" " * 3072)
    status, body = raw_exchange(small_limit_server, request)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_declared_length_over_the_limit_is_refused_before_any_body(small_limit_server: str) -> None:
    status, body = raw_exchange(small_limit_server, HEAD + b"content-length: 1000000000\r\n\r\n")
    assert status == 413
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


def test_chunked_body_within_the_limit_is_read_whole(small_limit_server: str) -> None:
    payload = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "x" * 3000}]}).encode()
    request = (
        HEAD
        + b"transfer-encoding: chunked\r\n\r\n"
        + chunked(*(payload[i : i + 700] for i in range(0, len(payload), 700)))
    )
    status, body = raw_exchange(small_limit_server, request + b"0\r\n\r\n")
    assert status == 404  # parsed whole: the served-model lookup ran
    assert json.loads(body)["error"]["code"] == "model_not_found"
