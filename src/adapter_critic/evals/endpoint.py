"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Where chat requests go: the service in-process (a config, or the built-in demo; no server needed: `InProcess` asks
its chat service directly, never an HTTP app) or any OpenAI-compatible server at a base URL, each request made with
the upstream retry rules.

A failure is an `UpstreamError` in the project's words ("could not connect to 127.0.0.1:9 (connection refused)").
At a base URL a request is one upstream call of this package's own client (`upstream.client.Upstream`), retried on a
connection error, a timeout, 429 or 5xx, with backoff, like any upstream; in-process the service retries each stage
itself, so the request is not retried again, and a request it refuses is said as the status a server would answer.

In-process runs are recorded in the run store as the standalone server records them (`ADAPTER_CRITIC_STORE`, else
the config's `store.url`, else the SQLite file in the user's data directory), so each result's `run_id` is a run
that `adapter-critic runs show` finds; a server at a base URL records in its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec
from starlette.types import ASGIApp

from ..config import Config
from ..core import StageTarget
from ..errors import APIError, ConfigError, EvalError, UpstreamError
from ..protocols.openai import INBOUND as OPENAI
from ..redact import Secrets, masked_logs, redact_userinfo
from ..service.compose import Service, compose
from ..service.outcomes import Answered, Caller
from ..store.settings import default_url, store_url
from ..upstream.client import Upstream
from ..upstream.failures import describe_transport_error
from ..upstream.retry import RetryPolicy, call_with_retries

IN_PROCESS_PREFIX = "/v1"
STAGE = "request"


@dataclass(frozen=True, slots=True)
class Reply:
    """A chat completion as the endpoint sent it, and how long the request took (retries included)."""

    body: dict[str, Any]
    latency_ms: float

    @property
    def text(self) -> str:
        choices = self.body.get("choices") or [{}]
        message = choices[0].get("message") or {}
        content = message.get("content")
        if isinstance(content, str):
            return content
        calls = message.get("tool_calls")
        return msgspec.json.encode(calls).decode() if calls else ""


class EndpointError(EvalError):
    """The endpoint cannot be used at all (unreachable, or it does not serve a model asked for)."""


class Endpoint:
    """Sends chat-completions requests to one place; `describe` names it in messages."""

    def __init__(
        self, upstream: Upstream, base_url: str, policy: RetryPolicy, *, key_env: str | None = None, name: str = ""
    ) -> None:
        self._upstream = upstream
        self._target = StageTarget(model="-", base_url=base_url, key_env=key_env, retries=policy.retries)
        self._policy = policy
        self.in_process = base_url.startswith("/")
        self.describe = name or redact_userinfo(base_url)
        self.recorded_to: str | None = None  # in-process: the run store the runs go to (None: not recording)

    async def chat(self, body: dict[str, Any]) -> Reply:
        """One chat completion (`stream` off); raises `UpstreamError` once the retries are spent."""
        started = time.perf_counter()
        completion, _ = await call_with_retries(
            STAGE, self._target, lambda target: self._upstream.complete(STAGE, target, body), self._policy
        )
        latency_ms = (time.perf_counter() - started) * 1000
        source = completion.source or b"{}"
        return Reply(msgspec.json.decode(source), latency_ms)

    async def served_models(self) -> list[str] | None:
        """The model ids `GET /models` lists; None when the endpoint has no such route (not every server does).

        Raises `EndpointError` when the endpoint cannot be reached at all."""
        client = self._upstream.client_for(self._target.base_url)
        headers = self._upstream.headers_for(self._target)
        headers.pop("content-type", None)
        try:
            response = await client.get(f"{self._target.base_url}/models", headers=headers, timeout=10)
        except httpx.HTTPError as exc:
            said = describe_transport_error(exc, self._target) or self._upstream.secrets.redact(str(exc))
            raise EndpointError(f"{self.describe} cannot be reached: {said}") from None
        if response.status_code in (401, 403):
            raise EndpointError(f"{self.describe} refused the API key (HTTP {response.status_code}); see --api-key-env")
        try:
            data = response.json()["data"] if response.status_code == 200 else None
            return [str(model["id"]) for model in data] if isinstance(data, list) else None
        except (ValueError, KeyError, TypeError):
            return None

    async def require(self, models: list[str]) -> None:
        """Fail early, in one line, if the endpoint lists its models and one asked for is not among them."""
        served = await self.served_models()
        if served is None:
            return
        unknown = [model for model in models if model not in served]
        if unknown:
            names = ", ".join(repr(model) for model in unknown)
            raise EndpointError(f"{self.describe} does not serve {names}; it serves: {', '.join(served) or 'nothing'}")

    def failure(self, error: UpstreamError) -> str:
        """An `UpstreamError` of a request as one line naming the endpoint."""
        return f"{self.describe} {error.detail}".rstrip(".")


class InProcess(Endpoint):
    """The service serving a config, in this process: each request decoded and answered by its chat service
    (`service.chat`), never through the HTTP app, and rendered as the chat-completions response a server would send."""

    def __init__(self, service: Service, name: str, request_seconds: float) -> None:
        super().__init__(service.upstream, IN_PROCESS_PREFIX, RetryPolicy(retries=0), name=name)
        self.service = service
        self.request_seconds = request_seconds

    async def chat(self, body: dict[str, Any]) -> Reply:
        started = time.perf_counter()
        run_id = OPENAI.new_id()
        try:
            request = OPENAI.decode(msgspec.json.encode({**body, "stream": False}), max_messages=None)
            answered = await self.service.chat.answer(request, Caller(), run_id=run_id, request_id=run_id, headers={})
        except UpstreamError:
            raise
        except APIError as exc:  # the request itself was refused: said as a server would answer it
            shown = self.service.secrets.redact(exc.message)
            raise UpstreamError(
                stage=STAGE, target=self.describe, kind="status", detail=f"answered HTTP {exc.status_code}: {shown}",
                upstream_status=exc.status_code,
            ) from None  # fmt: skip
        assert isinstance(answered, Answered)  # a request that does not stream is run to its end
        rendered = OPENAI.response(answered.record, response_id=run_id, request=request)
        return Reply(msgspec.json.decode(rendered), (time.perf_counter() - started) * 1000)

    async def served_models(self) -> list[str] | None:
        return list(self.service.config.served_models)

    async def require(self, models: list[str]) -> None:
        """Fail early, in one line, if a model asked for is not served here (a prefixed name is, `[models]`)."""
        config = self.service.config
        unknown = [model for model in models if not config.serves(model)]
        if unknown:
            names = ", ".join(repr(model) for model in unknown)
            raise EndpointError(f"{self.describe} does not serve {names}; it serves: {', '.join(config.served_models)}")


@contextlib.asynccontextmanager
async def in_process(
    config: Config, in_process_app: ASGIApp | None, request_seconds: float, name: str
) -> AsyncIterator[Endpoint]:
    """The service serving `config` (`name`: its file, or the demo), running in this process (started and stopped
    as a server's lifespan would), recording its runs in the run store; a store asked for that cannot be used is an
    `EndpointError`."""
    try:
        service = compose(config, in_process_app=in_process_app, store_default=default_url())
    except ConfigError as exc:
        raise EndpointError(str(exc)) from None
    asked = store_url(config.store, None)  # the env var or `store.url`; not the default, which may be given up
    if asked is not None and service.store is not None:
        await _require_store(asked)
    chat = service.chat
    with masked_logs(service.secrets):
        chat.start()
        await chat.start_recording()
    try:
        endpoint = InProcess(service, name, request_seconds)
        endpoint.recorded_to = service.store.where() if service.store is not None else None
        yield endpoint
    finally:
        with masked_logs(service.secrets):
            await chat.stop()


async def _require_store(url: str) -> None:
    """A run store asked for (`ADAPTER_CRITIC_STORE`, `store.url`) that cannot be opened is one line before anything
    runs, rather than the app's start-up failing with the database driver's traceback."""
    from ..store import open_store

    try:
        store = await open_store(url)
    except Exception as exc:  # the database driver's own errors (refused, no such directory, not a database…)
        said = str(exc).strip().splitlines()
        where = redact_userinfo(url)
        raise EndpointError(
            f"cannot open the run store {where}: {type(exc).__name__}: {said[0] if said else ''}"
        ) from None
    await store.aclose()


@contextlib.asynccontextmanager
async def remote(base_url: str, key_env: str | None, request_seconds: float, retries: int) -> AsyncIterator[Endpoint]:
    """A server at `base_url` (`…/v1`), its key read from the env var `key_env`."""
    upstream = Upstream(timeout=request_seconds, secrets=Secrets([key_env] if key_env else []), connect_timeout=10)
    upstream.open()
    try:
        yield Endpoint(upstream, base_url.rstrip("/"), RetryPolicy(retries=retries), key_env=key_env)
    finally:
        await upstream.aclose()
