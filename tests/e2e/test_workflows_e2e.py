"""End to end, the advisor, panel and best_of_n workflows (issue 12), and self_consistency, self_refine and re2: real
`uvicorn adapter_critic.asgi:app` in front of the scripted upstream running as a server, driven with the official
`openai` SDK, plain and `stream=True`.

The servers start once per module; each test resets the upstream's script and recorded calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from ..conftest import RemoteUpstream, run_app, sdk
from ..helpers import extension

MESSAGES: list[Any] = [{"role": "user", "content": "Name a prime."}]
QUESTION = "A pen costs 3 and a book 12. What do 2 pens and a book cost?"


def config_toml(upstream_url: str) -> str:
    up = f"{upstream_url}/v1"
    return f"""
default_api_key_env = "UP_KEY"
retries = 0
keepalive_seconds = 1  # a stream with nothing to say yet starts within a second (its first keep-alive)

[served_models.e2e-advisor]
mode = "advisor"
api = {{ model = "api-model", base_url = "{up}" }}
advisor = {{ model = "advisor-model", base_url = "{up}" }}

[served_models.e2e-panel]
mode = "panel"
api = {{ model = "api-model", base_url = "{up}" }}
critic = {{ model = "critic-model", base_url = "{up}" }}
coordinator = {{ model = "coordinator-model", base_url = "{up}" }}
lenses = [
  {{ name = "facts", system_prompt = "Check the facts." }},
  {{ name = "style", system_prompt = "Check the style." }},
]

[served_models.e2e-best]
mode = "best_of_n"
api = {{ model = "api-model", base_url = "{up}" }}
judge = {{ model = "judge-model", base_url = "{up}" }}
n = 2
candidate_options = {{ temperature = 0.8 }}

[served_models.e2e-consistent]
mode = "self_consistency"
api = {{ model = "api-model", base_url = "{up}" }}
n = 3
temperature = 0.9

[served_models.e2e-refine]
mode = "self_refine"
api = {{ model = "api-model", base_url = "{up}" }}
feedback = {{ model = "feedback-model", base_url = "{up}" }}
max_rounds = 2

[served_models.e2e-re2]
mode = "re2"
api = {{ model = "api-model", base_url = "{up}" }}
"""


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory, upstream_url: str) -> Iterator[tuple[str, str]]:
    path: Path = tmp_path_factory.mktemp("workflows") / "config.toml"
    with run_app(path, config_toml(upstream_url), UP_KEY="sk-e2e-workflows") as (app_url, _):
        yield upstream_url, app_url


@pytest.fixture
def up(urls: tuple[str, str]) -> RemoteUpstream:
    return RemoteUpstream(urls[0]).reset()


@pytest.fixture
def client(urls: tuple[str, str]) -> OpenAI:
    return sdk(OpenAI(base_url=f"{urls[1]}/v1", api_key="x", max_retries=0))


def streamed(client: OpenAI, model: str, messages: list[Any] = MESSAGES) -> tuple[str, dict[str, Any]]:
    """The streamed answer's text and the extension of its last chunk."""
    text, ext = "", {}
    for chunk in client.chat.completions.create(model=model, messages=messages, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.model_extra and "adapter_critic" in chunk.model_extra:
            ext = chunk.model_extra["adapter_critic"]
    return text, ext


def script_advisor(up: RemoteUpstream) -> None:
    up.script({"content": "Pick a small one.", "model": "advisor-model"}, {"content": "Seven.", "model": "api-model"})


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_advisor(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    script_advisor(up)
    if stream:
        text, ext = streamed(client, "e2e-advisor")
    else:
        response = client.chat.completions.create(model="e2e-advisor", messages=MESSAGES)
        text, ext = response.choices[0].message.content or "", extension(response)
        assert response.usage is not None and response.usage.total_tokens == ext["tokens"]["total"]["total_tokens"] == 6
    assert text == "Seven."
    assert ext["intermediate"] == {"advisor": "Pick a small one.", "final": "Seven."}
    calls = up.calls()
    assert [call["body"]["model"] for call in calls] == ["advisor-model", "api-model"]
    assert "Pick a small one." in calls[1]["body"]["messages"][0]["content"]
    assert calls[1]["body"].get("stream", False) is stream  # the answer itself streams live


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_panel(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    up.script(
        {"content": "Nine.", "model": "api-model"},
        {"content": "- 9 is not prime", "match": "Check the facts.", "gather": 2, "group": "lenses"},
        {"content": "- fine", "match": "Check the style.", "gather": 2, "group": "lenses"},
        {"content": "1. [facts] 9 is not prime", "model": "coordinator-model"},
        {"content": "Seven.", "model": "api-model"},
    )
    if stream:
        text, ext = streamed(client, "e2e-panel")
    else:
        response = client.chat.completions.create(model="e2e-panel", messages=MESSAGES)
        text, ext = response.choices[0].message.content or "", extension(response)
        assert response.usage is not None and response.usage.total_tokens == 5 * 3
    assert text == "Seven."
    assert ext["intermediate"]["lenses"] == {"facts": "- 9 is not prime", "style": "- fine"}
    assert ext["intermediate"]["coordinator"] == "1. [facts] 9 is not prime"
    assert set(ext["tokens"]["stages"]) == {"api_draft", "lens:facts", "lens:style", "coordinator", "api_final"}
    assert up.calls()[-1]["body"].get("stream", False) is stream


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_best_of_n(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    up.script(
        {"content": "Nine.", "model": "api-model", "gather": 2, "group": "candidates"},
        {"content": "Seven.", "model": "api-model", "gather": 2, "group": "candidates"},
        {"content": "Winner: B", "model": "judge-model", "match": "<reply_A>\nNine."},
        {"content": "Winner: A", "model": "judge-model", "match": "<reply_A>\nSeven."},
    )
    if stream:
        text, ext = streamed(client, "e2e-best")
    else:
        response = client.chat.completions.create(model="e2e-best", messages=MESSAGES)
        text, ext = response.choices[0].message.content or "", extension(response)
        assert response.usage is not None and response.usage.total_tokens == 4 * 3
    assert sorted(ext["intermediate"]["candidates"]) == ["Nine.", "Seven."]
    assert ext["intermediate"]["candidates"][ext["intermediate"]["chosen"]] == "Seven." == text
    assert all(call["body"]["temperature"] == 0.8 for call in up.calls()[:2])


@pytest.mark.parametrize("model", ["e2e-panel", "e2e-best"])
def test_a_client_that_leaves_cancels_every_concurrent_call(
    urls: tuple[str, str], up: RemoteUpstream, model: str
) -> None:
    # The lenses (or candidates) would answer in a minute; the client leaves once both are in flight.
    held = {"content": "late", "delay": 60}
    if model == "e2e-panel":
        up.script(
            {"content": "Nine.", "model": "api-model"},
            {**held, "model": "critic-model"},
            {**held, "model": "critic-model"},
        )
    else:
        up.script({**held, "model": "api-model"}, {**held, "model": "api-model"})
    # Status and headers go out with the first write: the panel's draft's progress chunk, or for best-of-n, whose
    # candidates are both held, the first keep-alive (a second in; the default 10 s raced the client's timeout).
    body = {"model": model, "messages": MESSAGES, "stream": True, "x_adapter_critic": {"progress": True}}
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", f"{urls[1]}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        assert up.holding(count=2, wait=10) == 2  # both concurrent calls are in flight
    # Leaving the block closed the unfinished response, and with it the connection.
    aborted = up.aborted(wait=10, count=2)
    assert len(aborted) == 2
    assert {call["body"]["model"] for call in aborted} == {"critic-model" if model == "e2e-panel" else "api-model"}


# -- self_consistency, self_refine and re2 ----------------------------------------------------------------------


def answer(client: OpenAI, model: str, stream: bool) -> tuple[str, dict[str, Any]]:
    """The answer to QUESTION: its text and the extension (of the last chunk, when streamed)."""
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    if stream:
        return streamed(client, model, messages)
    response = client.chat.completions.create(model=model, messages=messages)
    ext = extension(response)
    assert response.usage is not None and response.usage.total_tokens == ext["tokens"]["total"]["total_tokens"]
    return response.choices[0].message.content or "", ext


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_self_consistency(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    sample = {"model": "api-model", "gather": 3, "group": "samples"}  # held until all three overlap
    up.script(
        {**sample, "content": "2 * 3 = 6, plus 12 is 18."},
        {**sample, "content": "3 + 12 = 15."},
        {**sample, "content": "Two pens are 6; with the book, 18.0"},
    )
    text, ext = answer(client, "e2e-consistent", stream)
    samples = ext["intermediate"]["samples"]  # in the order of the sample calls, which took the replies as they came
    assert sorted(samples) == ["2 * 3 = 6, plus 12 is 18.", "3 + 12 = 15.", "Two pens are 6; with the book, 18.0"]
    assert ext["intermediate"]["votes"] == {"18": 2, "15": 1}
    assert ext["intermediate"]["chosen_by"] == "majority"
    assert text == samples[ext["intermediate"]["chosen"]] == next(s for s in samples if "18" in s)
    calls = up.calls()
    assert len(calls) == 3 and all(call["body"]["temperature"] == 0.9 for call in calls)
    assert all(not call["body"].get("stream") for call in calls)  # voted on, then sent as chunks


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_self_refine(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    up.script(
        {"model": "api-model", "content": "15."},
        {"model": "feedback-model", "content": "- Two pens, not one: 2 * 3 + 12."},
        {"model": "api-model", "content": "18."},
        {"model": "feedback-model", "content": "- Show the working."},
        {"model": "api-model", "content": "2 * 3 + 12 = 18."},
    )
    text, ext = answer(client, "e2e-refine", stream)
    assert text == "2 * 3 + 12 = 18."
    assert ext["intermediate"]["feedback:1"] == "- Two pens, not one: 2 * 3 + 12."
    assert ext["intermediate"]["refine:1"] == "18."
    assert ext["intermediate"]["feedback:2"] == "- Show the working."
    calls = up.calls()
    assert [call["body"]["model"] for call in calls] == ["api-model", "feedback-model"] * 2 + ["api-model"]
    assert [bool(call["body"].get("stream")) for call in calls] == [False] * 4 + [stream]  # the last refine live
    assert len(calls[-1]["body"]["messages"]) == 5  # the question, then each answer and the feedback on it


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_re2(client: OpenAI, up: RemoteUpstream, stream: bool) -> None:
    up.script({"model": "api-model", "content": "18."})
    text, ext = answer(client, "e2e-re2", stream)
    assert text == "18."
    [call] = up.calls()
    assert call["body"]["messages"] == [{"role": "user", "content": f"{QUESTION}\nRead the question again: {QUESTION}"}]
    assert bool(call["body"].get("stream")) is stream
    assert ext["intermediate"]["reread"] == f"Read the question again: {QUESTION}"


def test_a_failed_sample_degrades_and_is_noted(client: OpenAI, up: RemoteUpstream) -> None:
    up.script(
        {"model": "api-model", "content": "18", "match": QUESTION},
        {"model": "api-model", "status": 500, "body": '{"error": {"message": "overloaded"}}'},
        {"model": "api-model", "content": "It is 18."},
    )
    text, ext = answer(client, "e2e-consistent", stream=False)  # the samples take the replies in the order they came
    assert ext["degraded"] is True and ext["intermediate"]["votes"] == {"18": 2}
    [(stage, reason)] = ext["intermediate"]["sample_errors"].items()
    assert reason.endswith("answered HTTP 500: overloaded") and stage in ext["tokens"]["stages"]
    assert ext["intermediate"]["samples"][int(stage.split(":")[1]) - 1] is None
    assert text == next(sample for sample in ext["intermediate"]["samples"] if sample is not None)
