"""The benchmark servers' processes and what the servers and drivers share: starting a server on a free loopback
port (pinned to cores where the machine allows), waiting until it answers, stopping it, posting to it, reading the
CPU time and memory it used; and, inside a raw ASGI server, reading a POST's body (a readiness probe answered)."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


# -- inside a raw ASGI server ---------------------------------------------------------------------


async def request_body(receive: Any) -> bytes:
    """The whole body of a raw ASGI HTTP request."""
    body = b""
    while True:
        message = await receive()
        chunk: bytes = message.get("body", b"")
        body += chunk
        if not message.get("more_body", False):
            return body


async def answer_probe(send: Any) -> None:
    """A bare 200 `ok`, for readiness probes (any request that is not a POST)."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def post_body(scope: Any, receive: Any, send: Any) -> bytes | None:
    """The body of a POST, for a raw ASGI server; None when the request was something else, already dealt with: a
    readiness probe (any other method) answered, a scope that is not HTTP (lifespan) ignored."""
    if scope["type"] != "http":
        return None
    if scope["method"] != "POST":
        await answer_probe(send)
        return None
    return await request_body(receive)


# -- processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_kib(pid: int) -> int:
    """Resident set size of `pid` in KiB (0 if /proc does not say)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads) and of its live child processes (a store writer), from
    /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    total = (int(fields[11]) + int(fields[12])) / TICK
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(cpu_seconds(int(child)) for child in f.read().split())
    return total


def own_cpu_seconds(pid: int) -> float:
    """utime + stime of the process alone (all its threads, not its child processes: a store's writer process)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of the whole process (all threads) and of its live child processes, in seconds: the time its
    own code ran and the time the kernel ran for it (its syscalls: reads, writes, polls)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    user, system = int(fields[11]) / TICK, int(fields[12]) / TICK
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    child_user, child_system = cpu_split(int(child))
                    user, system = user + child_user, system + child_system
    return user, system


def cpu_seconds_precise(pid: int) -> float:
    """Time on CPU of every live thread, from schedstat (ns): a cross-check of `cpu_seconds`' 10 ms ticks."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def cpu_layout() -> tuple[list[int] | None, list[int] | None]:
    """(proxy cores, mock + load generator cores), or (None, None) when there is only one core to use."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return cpus[:1], cpus[1:]


def pin(cpus: list[int] | None) -> list[str]:
    return ["taskset", "-c", ",".join(map(str, cpus))] if cpus and shutil.which("taskset") else []


def uvicorn_flags() -> list[str]:
    flags = ["--no-access-log", "--log-level", "warning"]
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401

        flags += ["--loop", "uvloop"]
    with contextlib.suppress(ImportError):
        import httptools  # noqa: F401

        flags += ["--http", "httptools"]
    return flags


def python_path(*first: str | None) -> str:
    """PYTHONPATH for a child process: `first` (those given), this checkout (for `benchmarks` and `tests`), then
    this process's own PYTHONPATH."""
    return os.pathsep.join(filter(None, [*first, str(ROOT), os.environ.get("PYTHONPATH")]))


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    served: int = 0  # requests sent to it, for the memory figure

    @property
    def pid(self) -> int:
        return self.proc.pid


def start_server(name: str, args: list[str], *, cpus: list[int] | None, env: dict[str, str], workdir: Path) -> Server:
    """Start `python <args>` serving on a free loopback port.

    Not with uvicorn's `--fd`: uvicorn takes an inherited socket for a Unix socket, so its TCP connections
    would go without TCP_NODELAY and every small response would wait ~40 ms for a delayed ACK.
    """
    port = free_port()
    log = workdir / f"{name.replace(' ', '_')}.log"
    full_env = {**os.environ, **env, "PYTHONPATH": python_path(env.get("PYTHONPATH"))}
    command = [*pin(cpus), sys.executable, *args, "--host", "127.0.0.1", "--port", str(port), *uvicorn_flags()]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=full_env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    return Server(name, proc, port, log)


def stop_server(server: Server) -> None:
    stop_process(server.proc)


@contextlib.contextmanager
def stopping() -> Iterator[dict[str, Server]]:
    """A dict to start servers into, by name; every server in it is stopped on the way out."""
    started: dict[str, Server] = {}
    try:
        yield started
    finally:
        for server in started.values():
            stop_server(server)


def post(port: int, path: str, body: bytes, timeout: float = 60.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body, {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_ready(server: Server, deadline: float) -> None:
    while True:
        if server.proc.poll() is not None:
            raise SystemExit(f"{server.name} exited at start-up:\n{server.log.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2)
            conn.request("GET", "/v1/health")
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{server.name} did not start:\n{server.log.read_text()[-3000:]}") from None
            time.sleep(0.1)


def wait_all_ready(servers: Iterable[Server], seconds: float = 60) -> None:
    """Wait until every server answers, all within one deadline."""
    deadline = time.monotonic() + seconds
    for server in servers:
        wait_ready(server, deadline)
