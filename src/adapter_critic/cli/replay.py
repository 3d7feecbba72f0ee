"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`adapter-critic replay ID --model OTHER`: send a recorded run's request again, to another served model, and
show the two answers side by side, their diff, and the difference in tokens and latency.

The request is rebuilt from the store (its `messages` and every other field it carried, `stream` aside), so the
run must have been recorded with capture `full`. It goes in-process (`--config`, else the demo) or to a server
(`--base-url`). With `--cache` it asks to be answered from the exact-match cache (docs/guides/cache.md): replaying a
run to a served model that has its answer costs nothing.
"""

from __future__ import annotations

import difflib
from typing import Any

import anyio
import click
import msgspec
from rich.table import Table
from rich.text import Text

from ..errors import UpstreamError
from ..evals.endpoint import EndpointError, Reply
from ..store.records import RunDetail
from .console import stdout
from .errors import CliError
from .options import endpoint_options, open_endpoint
from .store import reading

_DIFF_STYLES = {"+": "green", "-": "red", "@": "cyan"}
_NOT_RESENT = ("stream", "stream_options", "model", "messages")


@click.command()
@click.argument("run_id", metavar="ID")
@click.option("--model", "-m", required=True, help="the served model to send the request to")
@endpoint_options
@click.option("--store", "store_url", envvar="ADAPTER_CRITIC_STORE", metavar="URL", help="the run store (as for runs)")
@click.option("--timeout", default=300.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--cache", is_flag=True, help="ask to be answered from MODEL's cache (a served model with cache = true)")
def replay(
    run_id: str,
    model: str,
    config_path: str | None,
    base_url: str | None,
    api_key_env: str | None,
    store_url: str | None,
    timeout: float,
    cache: bool,
) -> None:
    """Re-send run ID's request to MODEL; print both answers, their diff, and the token and latency difference."""

    async def run() -> tuple[RunDetail, Reply]:
        async with reading(store_url, config_path) as store:
            stored = await store.get_run(run_id)
        if stored is None:
            raise CliError(f"no run {run_id!r} in the run store")
        body = request_of(stored)
        if cache:
            given = body.get("x_adapter_critic")
            body["x_adapter_critic"] = {**(given if isinstance(given, dict) else {}), "cache": True}
        try:
            async with open_endpoint(config_path, base_url, api_key_env, seconds=timeout, retries=2) as endpoint:
                try:
                    await endpoint.require([model])
                    return stored, await endpoint.chat({**body, "model": model})
                except UpstreamError as exc:
                    raise CliError(endpoint.failure(exc)) from None
        except EndpointError as exc:
            raise CliError(str(exc)) from None

    stored, reply = anyio.run(run)
    show(stored, model, reply)


def request_of(run: RunDetail) -> dict[str, Any]:
    """The stored request as a body to send again (without `model`, `stream`)."""
    if run.request is None or run.request.messages is None:
        raise CliError(f"run {run.id!r} was recorded without its messages (capture = metadata): it cannot be replayed")
    options = {key: value for key, value in run.request.options.items() if key not in _NOT_RESENT}
    return {**options, "messages": run.request.messages}


def stored_answer(run: RunDetail) -> str:
    answer = run.answer
    if answer is None:
        return f"(no answer: {run.error.message})" if run.error is not None else "(no answer)"
    if answer.content is not None:
        return answer.content
    return msgspec.json.encode(answer.tool_calls).decode() if answer.tool_calls else ""


def show(run: RunDetail, model: str, reply: Reply) -> None:
    console = stdout()
    before, after = stored_answer(run), reply.text
    extension = reply.body.get("adapter_critic") if isinstance(reply.body.get("adapter_critic"), dict) else {}
    new_id = (extension or {}).get("run_id") or reply.body.get("id", "")
    sides = Table(title=f"run {run.id} replayed", title_justify="left", show_lines=True)
    sides.add_column(f"{run.served_model} (recorded)", ratio=1, overflow="fold")
    sides.add_column(f"{model} (now{', run ' + new_id if new_id else ''})", ratio=1, overflow="fold")
    sides.add_row(Text(before), Text(after))
    console.print(sides)
    cached = (extension or {}).get("cache")
    if isinstance(cached, dict) and cached.get("run_id"):
        console.print(f"answered from the cache: the answer of run {cached['run_id']}, at no cost", soft_wrap=True)

    usage = reply.body.get("usage") if isinstance(reply.body.get("usage"), dict) else {}
    numbers = Table(title="cost", title_justify="left")
    for column in ("", run.served_model, model, "difference"):
        numbers.add_column(column, justify="left" if not column else "right")
    old_usage = run.usage
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        old = getattr(old_usage, name) if old_usage is not None else None
        numbers.add_row(name.replace("_", " "), *_compare(old, (usage or {}).get(name)))
    numbers.add_row("latency ms", *_compare(run.duration_ms, reply.latency_ms, digits=0))
    console.print(numbers)

    if before == after:
        console.print("the answers are identical")
        return
    diff = difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"{run.served_model} (recorded)", f"{model} (now)", lineterm=""
    )
    for line in diff:
        console.print(Text(line, style=_DIFF_STYLES.get(line[:1], "")))


def _compare(old: float | None, new: float | None, digits: int = 0) -> tuple[str, str, str]:
    shown = [f"{value:.{digits}f}" if isinstance(value, int | float) else "?" for value in (old, new)]
    if isinstance(old, int | float) and isinstance(new, int | float):
        return shown[0], shown[1], f"{new - old:+.{digits}f}"
    return shown[0], shown[1], ""
