"""Cache fixtures: the standalone app with a served model that caches, served by real uvicorn in a subprocess over
a SQLite store file (`cached_app`), and helpers that compare a hit's answer with the original's."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..conftest import RemoteUpstream, run_app

UP_KEY = "sk-cache-upstream"


def config_toml(upstream_url: str, store_url: str = "", *, cache: str = "", ttl: str = "") -> str:
    """Two served models with `cache = true` — `reviewed` (critic: three upstream calls a run) and `direct` — one
    without (`uncached`, unless `cache` says otherwise), and prices."""
    store = f'[store]\nurl = "{store_url}"\n' if store_url else ""
    return f"""
retries = 0
default_api_key_env = "CACHE_UP_KEY"
{store}
[prices."api-model"]
input = 1.0
output = 2.0

[prices."critic-model"]
input = 3.0
output = 4.0

[served_models.reviewed]
mode = "critic"
api = {{ model = "api-model", base_url = "{upstream_url}/v1" }}
critic = {{ model = "critic-model", base_url = "{upstream_url}/v1" }}
cache = true
{ttl}

[served_models.direct]
mode = "direct"
api = {{ model = "api-model", base_url = "{upstream_url}/v1" }}
cache = true

[served_models.uncached]
mode = "direct"
api = {{ model = "api-model", base_url = "{upstream_url}/v1" }}
{cache}
"""


@pytest.fixture
def scripted(upstream_url: str) -> RemoteUpstream:
    return RemoteUpstream(upstream_url).reset()


@pytest.fixture
def store_file(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.sqlite3'}"


@pytest.fixture
def cached_app(upstream_url: str, store_file: str, tmp_path: Path) -> Iterator[str]:
    """The standalone app recording to a SQLite file, its `reviewed` model cached; yields its base URL."""
    with run_app(tmp_path / "cache.toml", config_toml(upstream_url, store_file), CACHE_UP_KEY=UP_KEY) as (url, _):
        # Its first answer waits for the app to start (the socket listens already): generously, on a busy machine,
        # where the tests' own requests keep httpx's default 5 s.
        httpx.get(f"{url}/v1/health", timeout=60).raise_for_status()
        yield url


def without_fresh_fields(body: bytes, response_id: str, original_id: str) -> bytes:
    """A hit's body as the original's would be: its response and run id (one value) the original's, `created` the
    same, and no `adapter_critic.cache` (the one field a hit adds)."""
    body = body.replace(response_id.encode(), original_id.encode())
    body = body.replace(b',"cache":{"hit":true,"run_id":"' + original_id.encode() + b'"}', b"")
    return re.sub(rb'"created(_at)?":\d+', b'"created":0', body)


def extension_of(value: Any) -> dict[str, Any]:
    """The `adapter_critic` extension of an SDK object (its extra fields) or a dict."""
    if isinstance(value, dict):
        found: dict[str, Any] = value["adapter_critic"]
        return found
    extra = value.model_extra or {}
    found = extra["adapter_critic"]
    return json.loads(json.dumps(found))
