"""adapter_critic mounted at `/v1` inside a FastAPI app.

It needs FastAPI, which adapter_critic does not depend on: `pip install fastapi` (or
`pip install 'adapter_critic[fastapi]'`). Run it from the repository root (the config defaults to `vllm.toml`
next to this file)::

    ADAPTER_CRITIC_CONFIG=examples/ollama.toml uvicorn fastapi_mount:app --app-dir examples --port 9000
    curl -s localhost:9000/v1/models

Starlette, and so FastAPI, never runs a mounted app's lifespan. The parent's own lifespan enters
the sub-app's, so adapter_critic's upstream HTTP client is opened at start-up and closed at shutdown.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

import adapter_critic

CONFIG = os.environ.get("ADAPTER_CRITIC_CONFIG") or Path(__file__).with_name("vllm.toml")

chat = adapter_critic.create_app(CONFIG)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with chat.router.lifespan_context(chat):
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/")
async def index() -> dict[str, str]:
    """The host app's own routes are untouched by the mount."""
    return {"app": "my service", "chat_completions": "/v1/chat/completions"}


app.mount("/v1", chat)  # POST /v1/chat/completions, GET /v1/models, GET /v1/health
