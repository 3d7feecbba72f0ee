"""Several adapter_critic replicas behind HAProxy with one PostgreSQL run store, all on loopback: the processes of
`benchmarks.replicas` (and of tests/deploy/test_replicas.py).

`cluster(replicas=3)` starts a throw-away PostgreSQL server (`tests.store.pgserver`), the scripted upstream
(`tests.scripted_upstream`, every call answered with an echo of its last user message after a short delay), N
replicas of `uvicorn adapter_critic.asgi:app` (one worker each, the same config and store) and HAProxy in front
of them: round-robin, health checks on `/v1/health`, a request whose connection to a replica fails retried on
another, its stats on a Unix socket and one log line per request (its `x-request-id`, the server, the status, how
it ended). Everything is stopped and removed on exit.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from tests.store.pgserver import postgres_server

from .procs import free_port, python_path, stop_process

ROOT = Path(__file__).parents[1]
# What the upstream answers every call with: an echo of the call's last user message (so each answer can be told
# apart and checked), after a delay long enough that a replica has requests in flight when it is killed.
UPSTREAM_REPLY = {"echo": True, "keep": True, "delay": 0.05, "chunk_delay": 0.005}
HAPROXY_CFG = """\
global
    log stdout format raw local0
    stats socket {socket} mode 600 level admin
    maxconn 2000

defaults
    mode http
    log global
    log-format "%[capture.req.hdr(0)] %s %ST %tsc %B"
    option redispatch 1
    retries 3
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # A replica that dies before answering: the client's connection is closed (no 502 page that reads as an answer).
    errorfile 502 {empty}

frontend chat
    bind 127.0.0.1:{port}
    capture request header x-request-id len 64
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /v1/health
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
{servers}
"""


@dataclass
class Replica:
    """One `uvicorn adapter_critic.asgi:app` process (one worker), restartable on the same port."""

    name: str
    port: int
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "uvicorn", "adapter_critic.asgi:app", "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--no-access-log", "--log-level", "info"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_healthy(self.url, self.proc)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no drain, as a crash or an OOM kill leaves it."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout=30)


@dataclass
class Balancer:
    """HAProxy in front of the replicas."""

    port: int
    stats_socket: Path
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, dict[str, str]]:
        """`show stat` of the replicas' backend, by server name (and `BACKEND`): HAProxy's own counters."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.stats_socket))
            sock.sendall(b"show stat\n")
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        rows = csv.DictReader(io.StringIO(raw.decode().lstrip("# ")))
        return {row["svname"]: row for row in rows if row["pxname"] == "replicas"}

    def log_lines(self) -> dict[str, tuple[str, int, str]]:
        """What HAProxy logged per request, by `x-request-id`: (server, status, termination state)."""
        lines: dict[str, tuple[str, int, str]] = {}
        for line in self.log.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0] != "-":
                lines[parts[0]] = (parts[1], int(parts[2]), parts[3])
        return lines

    def until_up(self, names: list[str], wait: float = 60) -> None:
        """Wait until HAProxy's health checks say every replica in `names` is UP."""
        deadline = time.monotonic() + wait
        while not all(self.stats().get(name, {}).get("status") == "UP" for name in names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"HAProxy did not see {names} UP within {wait} s: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)


@dataclass
class Cluster:
    upstream: str
    store_url: str
    replicas: list[Replica]
    balancer: Balancer
    folder: Path


def wait_healthy(url: str, proc: subprocess.Popen[bytes], wait: float = 60) -> None:
    """Wait until `url`'s `/v1/health` answers 200 (the process has started and opened its store)."""
    deadline = time.monotonic() + wait
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited ({proc.returncode}) before answering")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}: no answer to /v1/health within {wait} s")
        time.sleep(0.05)


def missing_tools() -> str | None:
    """Why the cluster cannot be started here, or None."""
    from tests.store.pgserver import missing_reason

    if shutil.which("haproxy") is None:
        return "haproxy is not installed here: apt-get install haproxy"
    return missing_reason()


@contextlib.contextmanager
def cluster(replicas: int = 3, heartbeat_seconds: float = 30.0) -> Iterator[Cluster]:
    folder = Path(tempfile.mkdtemp(prefix="adapter-critic-cluster-"))
    started: list[Replica] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with postgres_server() as server:
            store_url = f"{server}/postgres"
            upstream = _start_upstream(folder, procs)
            config = folder / "config.toml"
            config.write_text(_config(upstream, heartbeat_seconds))
            env = {**os.environ, "ADAPTER_CRITIC_CONFIG": str(config), "ADAPTER_CRITIC_STORE": store_url}
            env["PYTHONPATH"] = python_path()
            env.pop("PROMETHEUS_MULTIPROC_DIR", None)  # one worker each: its own numbers
            for index in range(replicas):
                replica = Replica(f"r{index + 1}", free_port(), env, folder / f"r{index + 1}.log")
                started.append(replica)
                replica.start()
            balancer = _start_balancer(folder, started, procs)
            balancer.until_up([replica.name for replica in started])
            yield Cluster(upstream, store_url, started, balancer, folder)
    finally:
        for replica in started:
            replica.stop()
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def _config(upstream: str, heartbeat_seconds: float) -> str:
    target = f'{{ model = "api-model", base_url = "{upstream}/v1" }}'
    critic = f'{{ model = "critic-model", base_url = "{upstream}/v1" }}'
    return (
        "retries = 0\n"
        "[store]\n"
        f"heartbeat_seconds = {heartbeat_seconds}\n"
        "[served_models.direct]\n"
        'mode = "direct"\n'
        f"api = {target}\n"
        "[served_models.critic]\n"
        'mode = "critic"\n'
        f"api = {target}\n"
        f"critic = {critic}\n"
    )


def _start_upstream(folder: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    sock.set_inheritable(True)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = {**os.environ, "PYTHONPATH": python_path()}
    with open(folder / "upstream.log", "ab") as log:
        command = [sys.executable, "-m", "tests.scripted_upstream", "--fd", str(sock.fileno())]
        procs.append(subprocess.Popen(command, pass_fds=(sock.fileno(),), env=env, stdout=log, stderr=log, cwd=ROOT))
    sock.close()
    httpx.post(f"{url}/_script", json=[UPSTREAM_REPLY], timeout=30).raise_for_status()
    return url


def _start_balancer(folder: Path, replicas: list[Replica], procs: list[subprocess.Popen[bytes]]) -> Balancer:
    empty = folder / "empty.http"
    empty.write_bytes(b"")
    servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} check" for r in replicas)
    port, stats = free_port(), folder / "haproxy.sock"
    cfg = folder / "haproxy.cfg"
    cfg.write_text(HAPROXY_CFG.format(socket=stats, empty=empty, port=port, servers=servers))
    haproxy = shutil.which("haproxy")
    assert haproxy is not None
    check = subprocess.run([haproxy, "-c", "-q", "-f", str(cfg)], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"haproxy -c: {check.stdout}{check.stderr}")
    log = folder / "haproxy.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([haproxy, "-db", "-f", str(cfg)], stdout=out, stderr=subprocess.STDOUT)
    procs.append(proc)
    deadline = time.monotonic() + 30
    while not stats.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"haproxy did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return Balancer(port, stats, log, proc)
