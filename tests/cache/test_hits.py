"""The exact-match cache over a SQLite store, through real uvicorn and the official SDKs: a hit is the original
answer — byte for byte for a plain chat completion, but for the fields that must be fresh — streamed or plain, in
the client's protocol, without an upstream call; only deterministic or opted-in requests are looked up, and only
runs that ended `ok` are kept."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import openai

from adapter_critic.store.records import RunQuery
from adapter_critic.store.runstore import open_store

from ..conftest import RemoteUpstream, run_app, sdk, stop_server
from .conftest import UP_KEY, config_toml, extension_of, without_fresh_fields

MESSAGES: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]
HEADER = "x-adapter-critic-cache"


def _client(url: str) -> openai.OpenAI:
    return sdk(openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0))


def test_a_plain_hit_is_the_original_body_but_for_its_ids(cached_app: str, scripted: RemoteUpstream) -> None:
    scripted.script({"content": "Paris.", "extra": {"system_fingerprint": "fp_up"}, "keep": True})
    client = _client(cached_app)
    first = client.chat.completions.with_raw_response.create(model="reviewed", messages=MESSAGES, temperature=0)
    assert first.headers[HEADER] == "miss" and len(scripted.calls()) == 3
    second = client.chat.completions.with_raw_response.create(model="reviewed", messages=MESSAGES, temperature=0)
    assert second.headers[HEADER] == "hit"
    assert len(scripted.calls()) == 3  # no upstream call
    original, hit = first.http_response.content, second.http_response.content
    original_id, hit_id = json.loads(original)["id"], json.loads(hit)["id"]
    assert hit_id != original_id and json.loads(hit)["adapter_critic"]["run_id"] == hit_id
    assert json.loads(hit)["adapter_critic"]["cache"] == {"hit": True, "run_id": original_id}
    assert json.loads(hit)["system_fingerprint"] == "fp_up"  # the upstream's own fields, relayed again
    assert without_fresh_fields(hit, hit_id, original_id) == re.sub(rb'"created":\d+', b'"created":0', original)


def _streamed(client: openai.OpenAI, **options: Any) -> tuple[dict[str, Any], str]:
    """What a client sees of a stream: the text, tool calls, finish reason, usage and extension; and the cache
    header."""
    raw = client.chat.completions.with_raw_response.create(
        messages=MESSAGES, temperature=0, stream=True, stream_options={"include_usage": True}, **options
    )
    seen: dict[str, Any] = {"content": "", "tool_calls": {}, "finish_reason": None, "usage": None}
    for chunk in raw.parse():
        for choice in chunk.choices:
            seen["content"] += choice.delta.content or ""
            for call in choice.delta.tool_calls or ():
                got = seen["tool_calls"].setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                got["id"] += call.id or ""
                got["name"] += (call.function.name or "") if call.function else ""
                got["arguments"] += (call.function.arguments or "") if call.function else ""
            seen["finish_reason"] = choice.finish_reason or seen["finish_reason"]
        if chunk.usage is not None:
            seen["usage"] = chunk.usage.model_dump()
        if chunk.model_extra and "adapter_critic" in chunk.model_extra:
            seen["extension"] = extension_of(chunk)
    return seen, raw.headers.get(HEADER, "")


def _same_but_ids(hit: dict[str, Any], original: dict[str, Any]) -> None:
    """The hit's view is the original's, its extension too but for its own run id and the cache's mark."""
    hit_ext, original_ext = hit.pop("extension"), original.pop("extension")
    assert hit_ext.pop("cache") == {"hit": True, "run_id": original_ext["run_id"]}
    assert hit_ext.pop("run_id") != original_ext.pop("run_id")
    assert (hit, hit_ext) == (original, original_ext)


def test_a_streamed_hit_gives_what_the_stream_gave(cached_app: str, scripted: RemoteUpstream) -> None:
    scripted.script({"content": "Paris, on the Seine.", "keep": True})
    client = _client(cached_app)
    original, said = _streamed(client, model="reviewed")
    assert said == "miss" and original["content"] == "Paris, on the Seine." and len(scripted.calls()) == 3
    hit, said = _streamed(client, model="reviewed")
    assert said == "hit" and len(scripted.calls()) == 3
    assert original["usage"]["total_tokens"] == 9  # three calls of 1 + 2
    _same_but_ids(hit, original)


def test_streamed_tool_calls_are_given_again_streamed_and_plain(cached_app: str, scripted: RemoteUpstream) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "capital", "arguments": '{"country":"FR"}'}}
    scripted.script({"content": None, "tool_calls": [call], "finish_reason": "tool_calls"})
    client = _client(cached_app)
    original, said = _streamed(client, model="direct")
    assert said == "miss" and original["tool_calls"] == {
        0: {"id": "call_1", "name": "capital", "arguments": '{"country":"FR"}'}
    }
    hit, said = _streamed(client, model="direct")
    assert said == "hit" and len(scripted.calls()) == 1
    _same_but_ids(hit, original)
    plain = client.chat.completions.create(model="direct", messages=MESSAGES, temperature=0)
    assert len(scripted.calls()) == 1
    [given] = plain.choices[0].message.tool_calls or []
    assert (given.id, given.function.name, given.function.arguments) == ("call_1", "capital", '{"country":"FR"}')
    assert plain.choices[0].finish_reason == "tool_calls"


def test_a_messages_client_is_answered_from_a_chat_completions_run(cached_app: str, scripted: RemoteUpstream) -> None:
    scripted.script({"content": "Paris.", "keep": True})
    first = _client(cached_app).chat.completions.create(
        model="reviewed", messages=MESSAGES, temperature=0, max_tokens=64
    )
    claude = sdk(anthropic.Anthropic(base_url=cached_app, api_key="unused", max_retries=0))
    zero = {"temperature": 0}  # (the SDK no longer takes sampling settings as arguments)
    raw = claude.messages.with_raw_response.create(model="reviewed", messages=MESSAGES, max_tokens=64, extra_body=zero)
    assert raw.headers[HEADER] == "hit" and len(scripted.calls()) == 3
    message = raw.parse()
    assert [block.text for block in message.content if block.type == "text"] == ["Paris."]
    assert message.stop_reason == "end_turn"
    assert first.usage is not None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        first.usage.prompt_tokens,
        first.usage.completion_tokens,
    )
    ext, original = extension_of(message), extension_of(first)
    assert ext.pop("cache") == {"hit": True, "run_id": first.id}
    assert ext.pop("run_id") != original.pop("run_id") and ext == original
    with claude.messages.stream(model="reviewed", messages=MESSAGES, max_tokens=64, extra_body=zero) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Paris." and final.usage.output_tokens == first.usage.completion_tokens
    assert len(scripted.calls()) == 3


def test_only_deterministic_or_opted_in_requests_are_cached(cached_app: str, scripted: RemoteUpstream) -> None:
    client = _client(cached_app)

    def ask(model: str = "direct", **options: Any) -> str:
        raw = client.chat.completions.with_raw_response.create(model=model, messages=MESSAGES, **options)
        return raw.headers.get(HEADER, "")

    opted_in = {"extra_body": {"x_adapter_critic": {"cache": True}}}
    assert [ask(temperature=0.7), ask(temperature=0.7)] == ["", ""]  # sampled: not looked up
    assert [ask(temperature=0.7, **opted_in), ask(temperature=0.7, **opted_in)] == ["miss", "hit"]
    opted_out = {"extra_body": {"x_adapter_critic": {"cache": False}}}
    assert [ask(temperature=0, **opted_out), ask(temperature=0, **opted_out)] == ["", ""]
    assert [ask(temperature=0, n=2), ask(temperature=0, n=2)] == ["", ""]  # several choices: samples
    assert [ask("uncached", temperature=0), ask("uncached", temperature=0)] == ["", ""]  # cache off: no header
    assert len(scripted.calls()) == 9  # every request but the one hit called the upstream
    # `stream` and `user` do not split the cache; another message, or another option, does.
    assert ask(temperature=0, user="someone") == "miss"
    assert ask(temperature=0, user="someone else") == "hit"
    assert ask(temperature=0, max_tokens=5) == "miss"


def test_a_degraded_run_is_not_kept(cached_app: str, scripted: RemoteUpstream) -> None:
    scripted.script({"model": "critic-model", "status": 500, "keep": True})
    client = _client(cached_app)
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(model="reviewed", messages=MESSAGES, temperature=0)
        assert raw.headers[HEADER] == "miss" and extension_of(raw.parse())["degraded"] is True
    assert len(scripted.calls()) == 4  # each time the draft and the failing critic: answered, never kept


def test_a_hit_is_recorded_as_a_run_of_its_own_costing_nothing(
    upstream_url: str, store_file: str, tmp_path: Path, scripted: RemoteUpstream
) -> None:
    """Across a restart (the answer read from the store's database): the hit is a run linked to the original, with
    no tokens and a cost of 0; `?cache_hit=true` lists it."""
    path, toml = tmp_path / "cache.toml", config_toml(upstream_url, store_file)
    with run_app(path, toml, CACHE_UP_KEY=UP_KEY) as (url, proc):
        first = _client(url).chat.completions.create(model="reviewed", messages=MESSAGES, temperature=0)
        stop_server(proc)  # drains the store's queue: the answer is in the database
    with run_app(path, toml, CACHE_UP_KEY=UP_KEY) as (url, proc):
        raw = _client(url).chat.completions.with_raw_response.create(model="reviewed", messages=MESSAGES, temperature=0)
        assert raw.headers[HEADER] == "hit" and len(scripted.calls()) == 3
        hit = raw.parse()
        stop_server(proc)

    async def read() -> tuple[Any, Any, Any]:
        async with await open_store(store_file) as store:
            hits = await store.list_runs(RunQuery(cache_hit=True))
            others = await store.list_runs(RunQuery(cache_hit=False))
            return hits, others, await store.get_run(hit.id)

    hits, others, detail = anyio.run(read)
    assert [run.id for run in hits.data] == [hit.id] and [run.id for run in others.data] == [first.id]
    [run] = hits.data
    assert run.cached_from == first.id and run.status == "ok"
    assert run.usage is not None and run.usage.total_tokens == 0
    assert run.cost is not None and (run.cost.total, run.cost.currency) == (0.0, "USD")
    assert others.data[0].cost is not None and (others.data[0].cost.total or 0) > 0
    assert detail is not None and detail.stages == [] and detail.answer is not None
    assert detail.answer.content == first.choices[0].message.content


def test_the_runs_api_filters_cache_hits(cached_app: str, scripted: RemoteUpstream) -> None:
    answer = httpx.get(f"{cached_app}/v1/runs", params={"cache_hit": "maybe"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "cache_hit"
    assert httpx.get(f"{cached_app}/v1/runs", params={"cache_hit": "true"}).json()["data"] == []
