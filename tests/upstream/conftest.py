"""Fixtures for the upstream tests: which network transport the app's own client gets."""

from __future__ import annotations

import pytest

from adapter_critic.upstream import transport as _transport


@pytest.fixture(params=["httpx", "aiohttp"])
def transport_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which transport the app's own client gets: httpx's (as when httpx-aiohttp is not installed) or aiohttp's."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    if request.param == "httpx":
        monkeypatch.setattr(_transport, "_BaseAiohttpTransport", None)
    return str(request.param)
