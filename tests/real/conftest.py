"""The product in real uvicorn in front of the real model server (tests/conftest.py's `llama`: llama-cpp-python with
SmolLM2-135M-Instruct, tests/real/llamaserver.py), with examples/smollm2.toml (every workflow, each stage on that
one model), its upstream address swapped for the server's; SDK clients of both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from ..conftest import run_app, sdk
from .llamaserver import LlamaServer

EXAMPLE = Path(__file__).parents[2] / "examples" / "smollm2.toml"
EXAMPLE_UPSTREAM = "http://127.0.0.1:8080"  # where the example expects the model server
TIMEOUT = 300.0  # a CPU model, several stages: generous, never reached in a healthy run


def real_config(server_url: str) -> str:
    """examples/smollm2.toml with its model server at `server_url`."""
    return EXAMPLE.read_text(encoding="utf-8").replace(EXAMPLE_UPSTREAM, server_url)


@pytest.fixture(scope="session")
def app_url(llama: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("real") / "smollm2.toml"
    with run_app(path, real_config(llama.url), LLAMA_API_KEY="") as (url, _):
        yield url


@pytest.fixture
def oai(app_url: str) -> openai.OpenAI:
    return sdk(openai.OpenAI(base_url=f"{app_url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT))


@pytest.fixture
def claude(app_url: str) -> anthropic.Anthropic:
    return sdk(anthropic.Anthropic(base_url=app_url, api_key="unused", max_retries=0, timeout=TIMEOUT))


@pytest.fixture
def straight(llama: LlamaServer) -> openai.OpenAI:
    """A client of the model server itself, bypassing the product: what the model says on its own."""
    return sdk(openai.OpenAI(base_url=f"{llama.url}/v1", api_key="unused", max_retries=0, timeout=TIMEOUT))
