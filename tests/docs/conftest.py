"""Fixtures of the snippet tests: the demo served by real uvicorn, a run it recorded, and a working directory.

The snippets talk to `http://127.0.0.1:8000`, the quick start's demo; the tests serve the demo on a port of their
own and put its address in the snippets instead. The working directory holds `config.toml` (served models whose
stages call that demo server, as a real upstream would be called) and `examples/` (the repository's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ..conftest import listening_socket, run_server
from .snippets import ROOT

DEMO = "127.0.0.1:8000"  # where the snippets expect the demo


@dataclass(frozen=True)
class Demo:
    address: str  # host:port
    run_id: str  # a finished demo-critic run, written to the store every server here records to
    env: dict[str, str]  # the environment of the snippets' processes (the store's data directory, PATH)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def localize(self, code: str) -> str:
        """A snippet's code with the demo's address where the snippet says 127.0.0.1:8000."""
        return code.replace(DEMO, self.address)


def snippet_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ADAPTER_CRITIC_CONFIG", "ADAPTER_CRITIC_STORE")}
    env["XDG_DATA_HOME"] = str(data_dir)  # the standalone default store: the demo's, the CLI's
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "200"
    return env


def _recorded_run(env: dict[str, str]) -> str:
    """One demo-critic run, recorded by a demo server that is then stopped gracefully (so the run is written)."""
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    args = [sys.executable, "-m", "uvicorn", "adapter_critic.asgi:app", "--fd", str(sock.fileno())]
    server = subprocess.Popen(args, pass_fds=(sock.fileno(),), env=env, stderr=subprocess.PIPE, text=True)
    sock.close()
    try:
        body = {"model": "demo-critic", "messages": [{"role": "user", "content": "Hello!"}]}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        run_id: str = answer.json()["id"]
    finally:
        server.send_signal(signal.SIGINT)  # a graceful stop writes what is queued
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    return run_id


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    env = snippet_env(tmp_path_factory.mktemp("docs-data"))
    run_id = _recorded_run(env)
    served = {"ADAPTER_CRITIC_CONFIG": "", "XDG_DATA_HOME": env["XDG_DATA_HOME"]}
    with run_server(["-m", "uvicorn", "adapter_critic.asgi:app"], env=served) as (url, _):
        yield Demo(url.removeprefix("http://"), run_id, {**env, "RUN_ID": run_id})


CONFIG = """\
# Served models whose stages call the demo server, as they would call a model server.
[served_models.served-critic]
mode = "critic"
api    = {{ model = "demo-direct", base_url = "{url}/v1" }}
critic = {{ model = "demo-direct", base_url = "{url}/v1" }}

[served_models.served-direct]
mode = "direct"
api = {{ model = "demo-direct", base_url = "{url}/v1" }}

# `critic-demo-direct`, `best_of_n&critic-demo-direct`…: any workflow on the demo server's models, by name.
[models]
technique_prefixes = true
upstream = "served-direct"
"""


@pytest.fixture
def workdir(tmp_path: Path, demo: Demo) -> Path:
    """A directory to run a snippet in: `config.toml` calling the demo server, and the repository's `examples/`."""
    (tmp_path / "config.toml").write_text(CONFIG.format(url=demo.url), encoding="utf-8")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path
