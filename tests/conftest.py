"""Shared fixtures: the scripted upstream, the app under test wired to it, and real servers in subprocesses."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

import httpx
import pytest
from asgi_lifespan import LifespanManager

from adapter_critic import Config, create_app

from .limits.redisserver import RedisServer, redis_server
from .limits.redisserver import missing_reason as redis_missing
from .real.llamaserver import LlamaServer, llama_server
from .real.llamaserver import missing_reason as llama_missing
from .scripted_upstream import ScriptedUpstream

# The suite starts hundreds of Python processes (servers, the command line) that import the package: they cache its
# bytecode, and pytest its rewritten test modules, even where the environment says not to (PYTHONDONTWRITEBYTECODE=1
# made every process compile the package again: the README's test command took 4 min 31 s with it, 3 min 58 s
# without, from a fresh clone on two cores). Set before the workers start, so they and every process they start
# inherit it.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one worker more than this process may use cores. Many tests wait on a server
    they started (uvicorn, PostgreSQL, a browser) rather than compute, so a spare worker keeps the cores busy: on two
    cores the suite without the real-model tests took 232 s with 2 workers, 205 s with 3, 219 s with 4."""
    return len(os.sched_getaffinity(0)) + 1


TESTS = Path(__file__).parent
UPSTREAM_URL = "http://upstream.test/v1"
OTHER_URL = "http://other.test/v1"

# The server's keys, for the tests of inbound auth, credential forwarding and redaction (see `server_keys`).
KEYS_ENV = "AC_TEST_INBOUND_KEYS"
INBOUND = "inbound-key-0123456789"
ROTATED = "inbound-key-rotated-987"
SERVER_KEY = "sk-server-key-0123456789"
CLIENT_KEY = "sk-client-own-key-456789"


def unavailable(reason: str) -> NoReturn:
    """Skip a test that needs something this machine lacks, saying what (`reason`); under `CI=true` fail instead:
    there a skip would hide a check that never ran (`.ci/run` installs and starts what the tests need)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; under CI these tests must run")
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def user_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The standalone server records runs in the user's data directory: a temporary one here (servers started in
    subprocesses inherit it)."""
    saved = {name: os.environ.get(name) for name in ("XDG_DATA_HOME", "ADAPTER_CRITIC_STORE")}
    path = tmp_path_factory.mktemp("data")
    os.environ["XDG_DATA_HOME"] = str(path)
    os.environ.pop("ADAPTER_CRITIC_STORE", None)
    yield path
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def redis_url() -> Iterator[RedisServer]:
    """A fresh throw-away Redis per test (a test may stop it): the limits' and the cache's tests."""
    reason = redis_missing()
    if reason is not None:
        unavailable(reason)
    with redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def llama() -> Iterator[LlamaServer]:
    """A real model server (tests/real/llamaserver.py), one per session: the `real_model` tests' and snippets'."""
    reason = llama_missing()
    if reason is not None:
        unavailable(reason)
    with llama_server() as server:
        yield server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream() -> ScriptedUpstream:
    return ScriptedUpstream()


@pytest.fixture
def server_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's upstream key (`OPENAI_API_KEY`) is SERVER_KEY; KEYS_ENV lists the accepted inbound keys,
    INBOUND and ROTATED, with the stray spaces and commas an operator may leave."""
    monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
    monkeypatch.setenv(KEYS_ENV, f" {INBOUND} , {ROTATED},")


def make_config(**overrides: Any) -> Config:
    """A config with one served model per mode, all stages on the scripted upstream at UPSTREAM_URL.

    Retries are off (`retries = 0`), so one scripted failure is the stage's failure; resilience tests turn them on."""
    data: dict[str, Any] = {
        "retries": 0,
        "served_models": {
            "m-direct": {"mode": "direct", "api": {"model": "api-model", "base_url": UPSTREAM_URL}},
            "m-adapter": {
                "mode": "adapter",
                "api": {"model": "api-model", "base_url": UPSTREAM_URL},
                "adapter": {"model": "adapter-model", "base_url": UPSTREAM_URL},
            },
            "m-critic": {
                "mode": "critic",
                "api": {"model": "api-model", "base_url": UPSTREAM_URL},
                "critic": {"model": "critic-model", "base_url": UPSTREAM_URL},
            },
        },
    }
    data.update(overrides)
    return Config.from_dict(data)


AppFactory = Callable[..., contextlib.AbstractAsyncContextManager[httpx.AsyncClient]]


@contextlib.asynccontextmanager
async def asgi_client(
    app: Any, base_url: str = "http://testserver", **transport: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """`app` with its lifespan running, and an httpx client talking to it in-process (the one test client)."""
    async with LifespanManager(app) as manager:
        client_transport = httpx.ASGITransport(app=manager.app, **transport)
        async with httpx.AsyncClient(transport=client_transport, base_url=base_url) as client:
            yield client


@pytest.fixture
def serve(upstream: ScriptedUpstream) -> AppFactory:
    """`async with serve(config) as client:` the app under test, its upstream calls going to `upstream`."""

    @contextlib.asynccontextmanager
    async def factory(config: Config | None = None) -> AsyncIterator[httpx.AsyncClient]:
        transport = httpx.ASGITransport(app=upstream.app)
        async with (
            httpx.AsyncClient(transport=transport) as upstream_client,
            asgi_client(create_app(config or make_config(), http_client=upstream_client)) as client,
        ):
            yield client

    return factory


def chat(model: str, content: str = "Hello", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


# -- SDK clients --------------------------------------------------------------------------------


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)
_sdk_clients: list[_Closable] = []


def sdk(client: _C) -> _C:
    """`client` (an `openai` or `anthropic` SDK client), closed when the test ends instead of whenever the garbage
    collector gets to it, with its pooled connections (possibly in a later test)."""
    _sdk_clients.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    yield
    while _sdk_clients:
        _sdk_clients.pop().close()


# -- real servers in subprocesses ---------------------------------------------------------------


UVICORN = [
    "-m",
    "uvicorn",
    "adapter_critic.asgi:app",
    "--log-level",
    "warning",
]  # `run_server(UVICORN)`: the standalone app


def listening_socket() -> socket.socket:
    """A socket already listening on loopback: clients may connect before the server process accepts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def run_server(args: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run `python <args> --fd N` as a subprocess serving on a fresh loopback socket; yields its base URL."""
    sock = listening_socket()
    port = sock.getsockname()[1]
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS.parent), full_env.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, *args, "--fd", str(sock.fileno())],
        pass_fds=(sock.fileno(),),
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    sock.close()
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


Server = contextlib.AbstractContextManager[tuple[str, subprocess.Popen[bytes]]]  # `with server as (url, process):`


def run_app(config: Path, text: str, **env: str) -> Server:
    """`run_server(UVICORN)`: the standalone app serving the config `text` (TOML, or JSON in a `.json` file) written
    to the file `config` (its `ADAPTER_CRITIC_CONFIG`), with `env` added to its environment."""
    config.write_text(text, encoding="utf-8")
    return run_server(UVICORN, env={"ADAPTER_CRITIC_CONFIG": str(config), **env})


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    """The scripted upstream as a real server on loopback, one per test module (`RemoteUpstream` scripts it)."""
    with run_server(["-m", "tests.scripted_upstream"]) as (url, _):
        yield url


def stop_server(proc: subprocess.Popen[bytes]) -> str:
    """Stop a `run_server` process (if still running) and return its stderr; the context's own exit is then a no-op."""
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    return err.decode("utf-8", "replace")


class RemoteUpstream:
    """The scripted upstream running as a server (`run_server(["-m", "tests.scripted_upstream"])`), scripted and
    inspected over HTTP."""

    def __init__(self, url: str) -> None:
        self.url = url

    def reset(self) -> RemoteUpstream:
        httpx.post(f"{self.url}/_reset").raise_for_status()
        return self

    def script(self, *replies: dict[str, Any]) -> None:
        httpx.post(f"{self.url}/_script", json=list(replies)).raise_for_status()

    def calls(self) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = httpx.get(f"{self.url}/_calls").json()
        return calls

    def models(self) -> list[str]:
        return [call["body"]["model"] for call in self.calls()]

    def resume(self) -> None:
        """Let go the streams paused by their reply's `stream_pause_after`."""
        httpx.post(f"{self.url}/_resume").raise_for_status()

    def holding(self, count: int, wait: float) -> int:
        """How many calls are held by their reply's `delay`, once `count` are (or `wait` seconds passed)."""
        answer = httpx.get(f"{self.url}/_holding", params={"count": count, "wait": wait}, timeout=wait + 5)
        held: int = answer.json()["holding"]
        return held

    def aborted(self, wait: float = 0, count: int = 1) -> list[dict[str, Any]]:
        """The aborted calls; with `wait`, the upstream first waits up to that many seconds for `count` of them."""
        aborted: list[dict[str, Any]] = httpx.get(
            f"{self.url}/_aborted", params={"wait": wait, "count": count}, timeout=wait + 5
        ).json()
        return aborted
