"""The built-in demo served by real uvicorn, and the official SDKs' clients of it (`demo_sdk` reads their answers);
the scripted upstream server, reset for each test (`up`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from ..conftest import UVICORN, RemoteUpstream, run_server, sdk


@pytest.fixture(scope="module")
def demo_url(user_data_dir: Path) -> Iterator[str]:
    """The standalone server without a config: the built-in demo."""
    with run_server(UVICORN, env={"ADAPTER_CRITIC_CONFIG": ""}) as (url, _):
        yield url


@pytest.fixture
def oai(demo_url: str) -> openai.OpenAI:
    return sdk(openai.OpenAI(base_url=f"{demo_url}/v1", api_key="demo", max_retries=0))


@pytest.fixture
def claude(demo_url: str) -> anthropic.Anthropic:
    return sdk(anthropic.Anthropic(base_url=demo_url, api_key="demo", max_retries=0))


@pytest.fixture
def up(upstream_url: str) -> RemoteUpstream:
    """The module's scripted upstream server (conftest's `upstream_url`), reset for this test."""
    return RemoteUpstream(upstream_url).reset()
