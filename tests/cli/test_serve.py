"""`adapter-critic serve` in subprocesses: its logs are the standalone server's (`uvicorn adapter_critic.asgi:app`),
line for line, and a port already in use is one `Error:` line."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import openai

from adapter_critic.demo import demo_config

from ..conftest import listening_socket, sdk
from .conftest import SCRIPT, Lines, one_error_line, run, script_env

UVICORN = Path(sys.executable).with_name("uvicorn")  # the server's own console script


def served_log(command: list[str], store: Path) -> list[str]:
    """What `command ... --fd N` writes to stderr while serving one chat completion of the demo, then Ctrl-C."""
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    env = {**script_env(), "ADAPTER_CRITIC_STORE": f"sqlite:///{store}"}
    args = [*command, "--fd", str(sock.fileno())]
    server = subprocess.Popen(args, pass_fds=(sock.fileno(),), env=env, stderr=subprocess.PIPE, text=True)
    sock.close()
    assert server.stderr is not None
    lines = Lines(server.stderr)
    try:
        client = sdk(openai.OpenAI(base_url=url, api_key="unused", max_retries=0))
        client.chat.completions.create(model="demo-direct", messages=[{"role": "user", "content": "Hi"}])
        lines.wait_for(lambda line: "demo-direct (direct) ok" in line)  # the run's line, logged as it finishes
    finally:
        server.send_signal(signal.SIGINT)
    text = lines.rest()
    assert server.wait(timeout=20) == 0
    server.stderr.close()
    return text.splitlines()


def normalized(lines: list[str]) -> list[str]:
    """The lines with what differs between two runs (ids, process ids, ports, milliseconds, paths) masked."""
    masked = [re.sub(r"\d+", "N", re.sub(r"[0-9a-f]{32}", "ID", re.sub(r"/\S*\.db", "STORE", line))) for line in lines]
    return sorted(masked)


def test_serve_logs_as_the_standalone_server(tmp_path: Path) -> None:
    served = served_log([str(SCRIPT), "serve"], tmp_path / "serve.db")
    standalone = served_log([str(UVICORN), "adapter_critic.asgi:app"], tmp_path / "uvicorn.db")
    assert normalized(served) == normalized(standalone)
    said = "\n".join(served)
    # What is served, where runs are recorded, one line per run, and warnings in uvicorn's format.
    assert (
        f"INFO:     serving {len(demo_config().served_models)} model(s): demo-direct (direct → in-process /demo/v1)"
        in said
    )
    assert f"INFO:     recording runs to sqlite+aiosqlite:///{tmp_path / 'serve.db'} (capture full)" in said
    assert re.search(r"INFO: +\[chatcmpl-[0-9a-f]{32}\] demo-direct \(direct\) ok in \d+ ms", said)
    assert "WARNING:     adapter_critic: no config given, serving the built-in DEMO" in said


def test_a_port_in_use_is_one_line() -> None:
    taken = listening_socket()
    port = taken.getsockname()[1]
    try:
        result = run("serve", "--port", str(port))
    finally:
        taken.close()
    assert result.returncode == 1
    said = one_error_line(result)
    assert said == f"Error: 127.0.0.1:{port} is already in use (another server?); choose another --port"
