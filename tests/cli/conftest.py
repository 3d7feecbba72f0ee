"""Fixtures of the command-line tests: the installed console script, Click's runner, a scripted upstream server."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from click.testing import CliRunner, Result

from adapter_critic.cli import cli

from ..conftest import RemoteUpstream

SCRIPT = Path(sys.executable).with_name("adapter-critic")  # the console script pip installed
EXAMPLES = Path(__file__).parents[2] / "examples"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """`adapter-critic ARGS` through Click's runner, in this process (stdout and stderr apart)."""
    environment = {"ADAPTER_CRITIC_CONFIG": None, **(env or {})}
    return CliRunner().invoke(cli, list(args), env=environment, catch_exceptions=False)


def run(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The installed `adapter-critic ARGS` in a subprocess."""
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=script_env()
    )


def script_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "ADAPTER_CRITIC_CONFIG"}
    env["COLUMNS"] = "200"
    return env


def one_error_line(result: subprocess.CompletedProcess[str] | Result) -> str:
    """The failure's stderr: exactly one line, `Error: ...`, and no traceback."""
    assert result.returncode if isinstance(result, subprocess.CompletedProcess) else result.exit_code
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.stderr
    return lines[0]


def write_jsonl(path: Path, *items: dict[str, Any]) -> Path:
    import json

    path.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def remote(upstream_url: str) -> RemoteUpstream:
    """The scripted upstream as a real server on loopback (reset before each use)."""
    return RemoteUpstream(upstream_url)


def config_file(tmp_path: Path, upstream_url: str, **served: dict[str, Any]) -> Path:
    """A TOML config whose served models (name -> {mode, model, critic?}) call the scripted upstream."""
    lines = ["retries = 0", "retry_backoff_seconds = 0.01"]
    for name, spec in served.items():
        lines.append(f'[served_models.{name}]\nmode = "{spec["mode"]}"')
        lines.append(f'api = {{ model = "{spec["model"]}", base_url = "{upstream_url}/v1" }}')
        if "critic" in spec:
            lines.append(f'critic = {{ model = "{spec["critic"]}", base_url = "{upstream_url}/v1" }}')
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Lines:
    """The lines a subprocess writes to a pipe, read on a thread so a test can wait for one with a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, wanted: Callable[[str], bool], timeout: float = 30) -> str:
        while True:
            line = self._queue.get(timeout=timeout)
            if line is None:
                raise AssertionError(f"the stream ended without the line; saw {self.seen}")
            self.seen.append(line)
            if wanted(line):
                return line

    def rest(self, timeout: float = 30) -> str:
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.seen.append(line)
        return "".join(self.seen)
