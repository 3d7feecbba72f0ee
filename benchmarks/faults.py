"""Fault injection under load: the product (real uvicorn) in front of a chaos upstream, both on loopback.

    python -m benchmarks.faults                        # 2,000 requests at concurrency 32
    python -m benchmarks.faults --requests 150 --json  # the CI size (tests/e2e/test_faults_small.py)
    python -m benchmarks.faults --soak                 # 20,000 requests, RSS and open fds every 2,000

The chaos upstream (`benchmarks/chaos_upstream.py`) fails a share of calls (`--fail`, default 0.3) in each of its
ways — reset, hang, 429 with and without Retry-After, 500, 503, truncated JSON, an HTML error page, empty choices,
the wrong content type, and for streams a cut or an error event midway — and delays another share. Every api target
has a fallback on the same chaos server, so fallbacks are exercised as well.

The load cycles through the three modes, streaming and not. Every request must end, within `--hang-seconds`, with
either a valid answer — a chat.completion (or a complete event stream ending in `[DONE]`) whose text is exactly the
upstream's answer, `usage` equal to the extension's total — or a valid error: the OpenAI envelope with the right
headers, or, once a stream has started, one `data: {"error": ...}` event and no `[DONE]`. Anything else is
malformed. The run prints a table and exits 1 if any request hung or was malformed, or the server did not shut
down cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # `python benchmarks/faults.py` as well as `python -m benchmarks.faults`
    sys.path.insert(0, str(ROOT))

from benchmarks import payloads  # noqa: E402
from benchmarks.loadgen import percentile  # noqa: E402
from benchmarks.procs import free_port, python_path, rss_kib  # noqa: E402

MODES = ("direct", "adapter", "critic")
SOAK_REQUESTS = 20_000
SOAK_EVERY = 2_000


@dataclass
class Tally:
    sent: int = 0
    finished: int = 0  # ended one way or another (hung ones included)
    ok: int = 0  # 200 with a valid answer (degraded ones included)
    degraded: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)  # valid error responses, by status
    hung: int = 0
    malformed: int = 0
    problems: collections.Counter[str] = field(default_factory=collections.Counter)  # what was malformed, by kind
    latencies_ms: list[float] = field(default_factory=list)


# -- processes ------------------------------------------------------------------------------------------------------


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def product_config(upstream: str, hang_seconds: float) -> str:
    api = (
        f'{{ model = "{payloads.API_MODEL}", base_url = "{upstream}/v1", '
        f'fallbacks = [{{ model = "{payloads.API_MODEL}", base_url = "{upstream}/fallback/v1" }}] }}'
    )
    return f"""
timeout_seconds = 1.0
connect_timeout_seconds = 1.0
retries = 2
retry_backoff_seconds = 0.05
retry_backoff_max_seconds = 1.0
request_timeout_seconds = {min(10.0, hang_seconds / 3)}
keepalive_seconds = 2
default_api_key_env = "CHAOS_KEY"

[served_models.chaos-direct]
mode = "direct"
api = {api}

[served_models.chaos-adapter]
mode = "adapter"
api = {api}
adapter = {{ model = "{payloads.ADAPTER_MODEL}", base_url = "{upstream}/v1" }}

[served_models.chaos-critic]
mode = "critic"
api = {api}
critic = {{ model = "{payloads.CRITIC_MODEL}", base_url = "{upstream}/v1" }}
"""


@contextlib.contextmanager
def started(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    full_env = {**os.environ, **env, "PYTHONPATH": python_path()}
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=full_env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_ready(port: int, path: str, proc: subprocess.Popen[bytes], log: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"a server exited at start-up:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise SystemExit(f"a server did not start:\n{log.read_text()[-3000:]}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes], log: Path, seconds: float = 30.0) -> bool:
    """SIGTERM, then wait: True if the server shut down by itself in time, without a traceback in its log.

    uvicorn re-raises the signal once it has shut down, so "by itself" is exit code 0 or -SIGTERM."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return code in (0, -signal.SIGTERM) and "Traceback" not in log.read_text(errors="replace")


# -- checking answers -----------------------------------------------------------------------------------------------


def envelope_problem(status: int, headers: httpx.Headers, raw: bytes) -> str | None:
    """None if this is a valid error response (docs/reference/http.md)."""
    if not headers.get("content-type", "").startswith("application/json"):
        return f"{status} not JSON"
    try:
        body = json.loads(raw)
    except ValueError:
        return f"{status} body not JSON"
    if not isinstance(body, dict) or set(body) != {"error"} or not isinstance(body["error"], dict):
        return f"{status} not an error envelope"
    if set(body["error"]) != {"message", "type", "param", "code"} or not body["error"]["message"]:
        return f"{status} envelope fields"
    if status in (502, 504) and headers.get("x-should-retry") != "false":
        return f"{status} without x-should-retry: false"
    return None


def completion_problem(data: Any, served: str, mode: str) -> str | None:
    """None if `data` is a valid chat.completion answering the chaos upstream's text."""
    try:
        message = data["choices"][0]["message"]
        ext = data["adapter_critic"]
        checks = {
            "object": data["object"] == "chat.completion",
            "id": data["id"].startswith("chatcmpl-"),
            "model": data["model"] == served,
            "role": message["role"] == "assistant",
            "content": message["content"] == payloads.ANSWER,
            "usage": data["usage"] == ext["tokens"]["total"],
            "mode": ext["mode"] == mode,
            "degraded reason": not ext.get("degraded") or any(k.endswith("_error") for k in ext["intermediate"]),
        }
    except (KeyError, IndexError, TypeError, AttributeError):
        return "completion shape"
    failed = [name for name, passed in checks.items() if not passed]
    return f"completion {failed[0]}" if failed else None


def stream_outcome(raw: bytes, served: str, mode: str) -> tuple[str, str | None]:
    """("ok" | "degraded" | "error event", None), or ("malformed", what)."""
    events = [e for e in raw.decode("utf-8", "replace").split("\n\n") if e]
    data = [e[len("data: ") :] for e in events if e.startswith("data: ")]
    if any(not (e.startswith("data: ") or e.startswith(":")) for e in events) or not data:
        return "malformed", "stream framing"
    if data[-1] != "[DONE]":
        try:
            last = json.loads(data[-1])
        except ValueError:
            return "malformed", "stream cut short"
        if "[DONE]" in data or not isinstance(last, dict) or set(last) != {"error"}:
            return "malformed", "stream cut short"
        if set(last["error"]) != {"message", "type", "param", "code"}:
            return "malformed", "stream error event fields"
        return "error event", None
    try:
        chunks = [json.loads(d) for d in data[:-1]]
    except ValueError:
        return "malformed", "stream chunk not JSON"
    if data.count("[DONE]") != 1 or not chunks:
        return "malformed", "stream [DONE]"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    ext = chunks[-1].get("adapter_critic") or {}
    if len({c.get("id") for c in chunks}) != 1 or {c.get("model") for c in chunks} != {served}:
        return "malformed", "stream ids"
    if text != payloads.ANSWER:
        return "malformed", "stream text"
    if ext.get("mode") != mode:
        return "malformed", "stream extension"
    return ("degraded" if ext.get("degraded") else "ok"), None


async def one(client: httpx.AsyncClient, url: str, index: int, tally: Tally, hang_seconds: float) -> None:
    mode = MODES[index % 3]
    stream = (index // 3) % 2 == 1
    served = f"chaos-{mode}"
    body = payloads.request_bytes(served, "small", stream=stream)
    tally.sent += 1
    started = time.perf_counter()
    try:
        async with asyncio.timeout(hang_seconds):
            async with client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as r:
                raw = await r.aread()
    except TimeoutError:
        tally.hung += 1
        return
    except httpx.HTTPError as exc:
        tally.malformed += 1
        tally.problems[f"transport {type(exc).__name__}"] += 1
        return
    tally.latencies_ms.append((time.perf_counter() - started) * 1000)
    problem: str | None
    if r.status_code != 200:
        problem = envelope_problem(r.status_code, r.headers, raw)
        if problem is None:
            tally.errors[str(r.status_code)] += 1
    elif stream:
        outcome, problem = stream_outcome(raw, served, mode)
        if outcome == "error event":
            tally.errors["200 + error event"] += 1
        elif problem is None:
            tally.ok += 1
            tally.degraded += outcome == "degraded"
    else:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        problem = completion_problem(data, served, mode)
        if problem is None:
            tally.ok += 1
            tally.degraded += bool(data["adapter_critic"].get("degraded"))
    if problem is not None:
        tally.malformed += 1
        tally.problems[problem] += 1


async def drive(
    port: int, requests: int, concurrency: int, hang_seconds: float, on_progress: Any = None
) -> tuple[Tally, float]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    tally = Tally()
    next_index = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    began = time.perf_counter()
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:

        async def worker() -> None:
            nonlocal next_index
            while next_index < requests:
                index = next_index
                next_index += 1
                await one(client, url, index, tally, hang_seconds)
                tally.finished += 1
                if on_progress is not None and tally.finished % SOAK_EVERY == 0:
                    on_progress(tally.finished)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tally, time.perf_counter() - began


# -- the run --------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="adapter-critic-faults-"))
    chaos_port, product_port = free_port(), free_port()
    config = workdir / "config.toml"
    config.write_text(product_config(f"http://127.0.0.1:{chaos_port}", args.hang_seconds))
    chaos_command = [
        sys.executable, "-m", "benchmarks.chaos_upstream", "--port", str(chaos_port), "--fail", str(args.fail),
        "--delay", str(args.delay), "--seed", str(args.seed), "--hang-seconds", str(args.hang_seconds),
    ]  # fmt: skip
    product_command = [
        sys.executable, "-m", "uvicorn", "adapter_critic.asgi:app", "--host", "127.0.0.1", "--port",
        str(product_port), "--no-access-log", "--log-level", "warning", "--timeout-graceful-shutdown", "30",
    ]  # fmt: skip
    env = {"ADAPTER_CRITIC_CONFIG": str(config), "CHAOS_KEY": "sk-chaos-not-a-secret"}
    chaos_log, product_log = workdir / "chaos.log", workdir / "product.log"
    with started(chaos_command, {}, chaos_log) as chaos, started(product_command, env, product_log) as product:
        wait_ready(chaos_port, "/v1/models", chaos, chaos_log)
        wait_ready(product_port, "/v1/health", product, product_log)
        rss_before, fds_before = rss_kib(product.pid), open_fds(product.pid)
        checkpoints: list[tuple[int, int, int]] = []

        def progress(done: int) -> None:
            checkpoints.append((done, rss_kib(product.pid), open_fds(product.pid)))
            if args.soak:
                print(f"  {done:>6} requests: RSS {checkpoints[-1][1] / 1024:.1f} MiB, {checkpoints[-1][2]} fds")

        tally, seconds = asyncio.run(
            drive(product_port, args.requests, args.concurrency, args.hang_seconds, on_progress=progress)
        )
        rss_after, fds_after = rss_kib(product.pid), open_fds(product.pid)
        chaos_stats = httpx.get(f"http://127.0.0.1:{chaos_port}/_stats", timeout=5).json()
        clean_shutdown = stop(product, product_log)
        stop(chaos, chaos_log)
    retries_logged = product_log.read_text(errors="replace").count("retrying in")
    fallbacks_logged = product_log.read_text(errors="replace").count("falling back to")
    return {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "seconds": round(seconds, 2),
        "sent": tally.sent,
        "ok": tally.ok,
        "degraded": tally.degraded,
        "errors": dict(sorted(tally.errors.items())),
        "hung": tally.hung,
        "malformed": tally.malformed,
        "problems": dict(tally.problems),
        "p50_ms": round(percentile(tally.latencies_ms, 50), 1),
        "p99_ms": round(percentile(tally.latencies_ms, 99), 1),
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "fds_before": fds_before,
        "fds_after": fds_after,
        "checkpoints": checkpoints,
        "upstream_calls": chaos_stats.pop("calls", 0),
        "upstream_outcomes": chaos_stats,
        "retries_logged": retries_logged,
        "fallbacks_logged": fallbacks_logged,
        "clean_shutdown": clean_shutdown,
        "workdir": str(workdir),  # the config and both servers' logs; removed when the run passes
    }


def table(result: dict[str, Any]) -> str:
    errors = ", ".join(f"{status}: {n}" for status, n in result["errors"].items()) or "none"
    faults = sum(n for kind, n in result["upstream_outcomes"].items() if kind not in ("ok", "delayed"))
    rows = [
        ("requests sent", f"{result['sent']} (concurrency {result['concurrency']}, {result['seconds']} s)"),
        ("answered 200", f"{result['ok']}"),
        ("  of which degraded", f"{result['degraded']}"),
        ("errors by status", errors),
        ("hung (must be 0)", f"{result['hung']}"),
        ("malformed (must be 0)", f"{result['malformed']}" + (f"  {result['problems']}" if result["problems"] else "")),
        ("latency p50 / p99", f"{result['p50_ms']} ms / {result['p99_ms']} ms"),
        ("product RSS before / after", f"{_mib(result['rss_before_kib'])} / {_mib(result['rss_after_kib'])}"),
        ("product open fds before / after", f"{result['fds_before']} / {result['fds_after']}"),
        ("upstream calls", f"{result['upstream_calls']}, of which {faults} failed on purpose"),
        ("injected", ", ".join(f"{k}: {v}" for k, v in sorted(result["upstream_outcomes"].items()))),
        ("retries / fallbacks logged", f"{result['retries_logged']} / {result['fallbacks_logged']}"),
        ("clean shutdown (SIGTERM)", "yes" if result["clean_shutdown"] else "NO"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--soak", action="store_true", help=f"{SOAK_REQUESTS} requests, RSS every {SOAK_EVERY}")
    parser.add_argument("--fail", type=float, default=0.3, help="share of upstream calls failed (default 0.3)")
    parser.add_argument("--delay", type=float, default=0.2, help="share of upstream calls delayed (default 0.2)")
    parser.add_argument("--hang-seconds", type=float, default=30.0, help="a request slower than this hung")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line after the table")
    args = parser.parse_args(argv)
    if args.soak:
        args.requests = max(args.requests, SOAK_REQUESTS)
    result = run(args)
    print(table(result))
    if args.soak and result["checkpoints"]:
        first, last = result["checkpoints"][0], result["checkpoints"][-1]
        print(
            f"soak: RSS {first[1] / 1024:.1f} MiB at {first[0]} requests -> {last[1] / 1024:.1f} MiB at {last[0]} "
            f"({(last[1] - first[1]) / 1024:+.1f} MiB); open fds {first[2]} -> {last[2]}"
        )
    if args.json:
        print(json.dumps(result))
    passed = result["hung"] == 0 and result["malformed"] == 0 and result["clean_shutdown"]
    if passed:
        shutil.rmtree(result["workdir"], ignore_errors=True)
    else:
        print(f"logs kept in {result['workdir']}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
