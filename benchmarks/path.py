"""The product's own path in one process: CPU per request of everything between uvicorn and aiohttp, the upstream and
the client faked, so that a change of a microsecond per request or per chunk shows (a server's figures move by more).

    python -m benchmarks.path [--chunks N | --plain [--parts]] [--requests R] [--tree TREE]

The chat handler (`http.service.compose` with `run.product_config`: store and metrics off) answers the direct served
model through the fast path's `answer`, as uvicorn would call it; `Upstream._post` is replaced by a fake that opens at
once and yields the mock's bytes — a plain completion (`--plain`), or the paced stream of N token chunks
(`payloads.paced_events`), one event per read with a loop iteration between reads, as a model's tokens arrive. The
client's `send` does nothing and its `receive` never says anything. Prints the best of 5 batches, CPU µs per request
(and per chunk over a stream of none, for a stream); `--tree` measures another source tree's `src` (a `git worktree`
of an earlier commit) instead of this checkout's, in a process of its own.

`--parts` (plain; `--tree` for another tree's): where a plain request's time goes, each part replaced in turn by
its own result, captured from a real request — the upstream call (`Upstream.complete` answering at once: its own
work and the fake's read), the run (`Run.execute` giving the finished record at once), everything below the
request's frame (`ChatHandler.chat` giving a finished answer at once) — in alternating rounds, medians of 7.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

from benchmarks import payloads, procs, run

_T = TypeVar("_T")


def events(chunks: int | None) -> list[bytes]:
    """What the fake upstream reads out: the plain completion (None) or a paced stream of `chunks` chunks."""
    if chunks is None:
        return [payloads.completion(payloads.API_MODEL, payloads.ANSWER)]
    return payloads.paced_events(chunks)


async def measure(chunks: int | None, requests: int, rounds: int = 5) -> float:
    """Best of `rounds` batches of `requests`, CPU µs per request."""
    return await _with_fake_upstream(chunks, _batches(chunks, requests, rounds))


async def _with_fake_upstream(chunks: int | None, work: Awaitable[_T]) -> _T:
    """`work` with every upstream call answered by the fake (module docstring)."""
    from adapter_critic.upstream import client

    reads = events(chunks)
    kind = "application/json" if chunks is None else "text/event-stream"

    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            await asyncio.sleep(0)  # a read is a wake-up of its own
            yield read

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[tuple[int, dict[str, str], AsyncIterator[bytes]]]:
        yield 200, {"content-type": kind}, body()

    with mock.patch.object(client.Upstream, "_post", lambda self, *args, **kwargs: opened()):
        return await work


async def _batches(chunks: int | None, requests: int, rounds: int) -> float:
    from adapter_critic.config.load import load_config
    from adapter_critic.http.fastpath import answer

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps(run.product_config("http://127.0.0.1:9/v1")))
        config = load_config(path)
    try:  # the service layer and the HTTP handler around it
        from adapter_critic.http.chat import ChatHandler
        from adapter_critic.service.compose import compose

        service = compose(config)
        handler: Any = ChatHandler(service.chat)
        lifespan: Any = service.chat
    except ImportError:  # a tree from before it (`--tree`): the handler was both
        from adapter_critic.http.service import compose as compose_before  # type: ignore[import-not-found]

        handler = lifespan = compose_before(config).handler
    lifespan.start()
    request = payloads.request_bytes("bench-direct", stream=chunks is not None)
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        pass

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        await handler.respond(request, scope, receive, send)

    async def one() -> None:
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": [], "state": {}}
        await answer(endpoint, scope, receive, send)

    for _ in range(50):
        await one()
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(requests):
            await one()
        best = min(best, (time.process_time() - started) / requests * 1e6)
    await lifespan.close()
    return best


def in_process(tree: Path | None, chunks: int | None, requests: int) -> float:
    """`measure` in a process of its own, on `tree`'s source (None: this checkout's)."""
    flags = ["--plain"] if chunks is None else ["--chunks", str(chunks)]
    return float(own_process(tree, [*flags, "--requests", str(requests)]).split()[-1])


def own_process(tree: Path | None, flags: list[str]) -> str:
    """What `python -m benchmarks.path <flags> --one` prints, run on `tree`'s source (None: this checkout's)."""
    env = {**os.environ, "PYTHONPATH": procs.python_path(run.source_of(tree) if tree else None)}
    command = [sys.executable, "-m", "benchmarks.path", *flags, "--one"]
    done = subprocess.run(command, env=env, capture_output=True, timeout=3600, check=True, cwd=procs.ROOT)
    return done.stdout.decode()


async def parts(requests: int, rounds: int = 7) -> dict[str, float]:
    """`--parts`: the plain path whole and with each part answered at once (module docstring); median CPU µs per
    request of each."""
    from adapter_critic.http.chat import ChatHandler
    from adapter_critic.pipeline.run import Run
    from adapter_critic.upstream import client

    done: dict[str, Any] = {}
    complete, execute = client.Upstream.complete, Run.execute

    async def completing(self: Any, *args: Any, **kwargs: Any) -> Any:
        done["completion"] = await complete(self, *args, **kwargs)
        return done["completion"]

    async def executing(self: Any, *args: Any, **kwargs: Any) -> Any:
        done["record"] = await execute(self, *args, **kwargs)
        return done["record"]

    async def completed(*args: Any, **kwargs: Any) -> Any:
        return done["completion"]

    async def executed(*args: Any, **kwargs: Any) -> Any:
        return done["record"]

    body = payloads.completion(payloads.API_MODEL, payloads.ANSWER)
    try:
        from adapter_critic.http.jsonanswer import JSONAnswer

        answered: Any = JSONAnswer(body)
    except ImportError:  # a tree from before it (`--tree`)
        from starlette.responses import Response

        answered = Response(body, media_type="application/json")

    async def chatted(*args: Any, **kwargs: Any) -> Any:
        return answered

    variants: dict[str, list[tuple[Any, str, Any]]] = {
        "the whole path": [],
        "the upstream call answered at once": [(client.Upstream, "complete", completed)],
        "the run answered at once": [(Run, "execute", executed)],
        "the request's own frame alone (the handler answered at once)": [(ChatHandler, "chat", chatted)],
    }
    with mock.patch.object(client.Upstream, "complete", completing), mock.patch.object(Run, "execute", executing):
        await _batches(None, 1, 1)  # a real request, its completion and record kept
    figures: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, patches in variants.items():
            with contextlib.ExitStack() as stack:
                for owner, attribute, value in patches:
                    stack.enter_context(mock.patch.object(owner, attribute, value))
                figures[name].append(await _batches(None, requests, 1))
    return {name: sorted(values)[len(values) // 2] for name, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=200, help="token chunks per streamed answer")
    parser.add_argument("--plain", action="store_true", help="a plain answer instead of a stream")
    parser.add_argument("--parts", action="store_true", help="with --plain: where its time goes, part by part")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--tree", type=Path, help="measure this source tree instead of this checkout")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one figure, in this process
    args = parser.parse_args()
    chunks = None if args.plain else args.chunks
    if chunks is None and args.parts:
        if args.tree is not None and not args.one:  # the tree's source in a process of its own
            print(own_process(args.tree, ["--plain", "--parts", "--requests", str(args.requests)]), end="")
            return
        import uvloop

        for name, figure in uvloop.run(_with_fake_upstream(None, parts(args.requests))).items():
            print(f"{name:<64}{figure:8.1f} µs per request")
        return
    if args.one:
        import uvloop

        print(f"{uvloop.run(measure(chunks, args.requests)):.2f}")
        return
    if chunks is None:
        print(f"plain direct: {in_process(args.tree, None, args.requests):.1f} µs per request")
        return
    streamed = in_process(args.tree, chunks, args.requests)
    bare = in_process(args.tree, 0, args.requests)
    print(f"direct, {chunks} paced chunks: {streamed:.1f} µs per request, no chunks {bare:.1f}; "
          f"{(streamed - bare) / max(chunks, 1):.2f} µs per chunk")  # fmt: skip


if __name__ == "__main__":
    main()
