"""An upstream's error status on the first API call, as each official SDK sees it through real uvicorn (SPEC §7):
every 5xx (502 too, whose number happens to be the one the client gets) is this server's own `upstream_error`
naming the stage and the target, never the upstream's own envelope relayed; a 4xx is the upstream's, relayed as
it said it. Chat completions, Anthropic Messages and Responses, plain and streamed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from openai import OpenAI

from ..conftest import RemoteUpstream as Upstream
from ..conftest import sdk
from .test_e2e import start_app

QUESTION: list[Any] = [{"role": "user", "content": "Where is the Eiffel Tower?"}]
# What a proxy in front of a model says when the model is down: an OpenAI envelope of its own.
TROUBLE = '{"error": {"message": "upstream trouble", "type": "server_error", "param": null, "code": null}}'
TOO_LONG = '{"error": {"message": "context too long", "type": "invalid_request_error", "param": "messages"}}'

Call = Callable[[str, bool], None]


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_app(upstream_url, tmp_path_factory.mktemp("errors"), "errors") as (url, _):
        yield url


def chat(app_url: str) -> Call:
    client = sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))

    def call(model: str, stream: bool) -> None:
        if stream:
            list(client.chat.completions.create(model=model, messages=QUESTION, stream=True))
        else:
            client.chat.completions.create(model=model, messages=QUESTION)

    return call


def messages(app_url: str) -> Call:
    client = sdk(anthropic.Anthropic(base_url=app_url, api_key="x", max_retries=0))

    def call(model: str, stream: bool) -> None:
        if stream:
            with client.messages.stream(model=model, max_tokens=50, messages=QUESTION) as events:
                events.get_final_message()
        else:
            client.messages.create(model=model, max_tokens=50, messages=QUESTION)

    return call


def responses(app_url: str) -> Call:
    client = sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))

    def call(model: str, stream: bool) -> None:
        if stream:
            list(client.responses.create(model=model, input="Where is the Eiffel Tower?", stream=True))
        else:
            client.responses.create(model=model, input="Where is the Eiffel Tower?")

    return call


PROTOCOLS = {"chat": chat, "messages": messages, "responses": responses}


def error_body(error: openai.APIStatusError | anthropic.APIStatusError) -> dict[str, Any]:
    body = error.response.json()
    detail: dict[str, Any] = body["error"]
    return detail


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("model", ["e2e-direct", "e2e-critic"])
@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_an_upstream_5xx_on_the_first_call_is_a_502_naming_the_stage(
    app_url: str, up: Upstream, status: int, model: str, protocol: str, stream: bool
) -> None:
    up.script({"status": status, "body": TROUBLE})
    with pytest.raises((openai.InternalServerError, anthropic.InternalServerError)) as info:
        PROTOCOLS[protocol](app_url)(model, stream)

    error = info.value
    assert error.status_code == 502
    assert error.response.headers["x-should-retry"] == "false"
    detail = error_body(error)
    stage = "api" if model == "e2e-direct" else "api_draft"
    assert detail["message"].startswith(f"The {stage} stage's upstream (api-model@{up.url}/v1) answered HTTP {status}")
    assert "upstream trouble" in detail["message"]  # what the upstream said, inside this server's own message
    assert detail["type"] == ("api_error" if protocol == "messages" else "upstream_error")
    assert len(up.calls()) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("model", ["e2e-direct", "e2e-critic"])
def test_an_upstream_4xx_on_the_first_call_is_relayed_as_the_upstream_said_it(
    app_url: str, up: Upstream, model: str, protocol: str, stream: bool
) -> None:
    up.script({"status": 400, "body": TOO_LONG})
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as info:
        PROTOCOLS[protocol](app_url)(model, stream)

    error = info.value
    assert error.status_code == 400
    assert error.response.headers["x-should-retry"] == "false"
    detail = error_body(error)
    assert detail["message"] == "context too long"
    assert detail["type"] == "invalid_request_error"
    if protocol != "messages":  # the OpenAI envelope, whole: its `param` too
        assert detail["param"] == "messages"


# -- an unusable answer's usage counts in its stage (SPEC §5) -------------------------------------------------------

DRAFT_USAGE = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}  # the scripted upstream's default
SPENT = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
UNUSABLE = [
    {"id": "x", "object": "chat.completion", "choices": [], "usage": SPENT},
    {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": "just a string"}], "usage": SPENT},
    {"object": "list", "data": [], "usage": SPENT},
]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("body", UNUSABLE, ids=["no-choices", "string-message", "not-a-completion"])
def test_a_degraded_critic_counts_the_usage_its_unusable_answer_reported(
    app_url: str, up: Upstream, body: dict[str, Any], stream: bool
) -> None:
    up.script({"content": "It is in Paris.", "model": "api-model"}, {"body": json.dumps(body), "model": "critic-model"})
    client = sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="e2e-critic", messages=QUESTION, stream=True, stream_options={"include_usage": True}
            )
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        last = chunks[-1]
    else:
        completion = client.chat.completions.create(model="e2e-critic", messages=QUESTION)
        text, last = completion.choices[0].message.content or "", completion

    assert text == "It is in Paris."  # the draft stands
    assert last.model_extra is not None and last.usage is not None
    ext = last.model_extra["adapter_critic"]
    assert ext["degraded"] is True and "critic_error" in ext["intermediate"]
    assert ext["tokens"]["stages"] == {"api_draft": DRAFT_USAGE, "critic": SPENT}
    assert ext["tokens"]["total"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    assert last.usage.model_dump(exclude_none=True) == ext["tokens"]["total"]
    assert "critic" not in ext["tokens"].get("unreported", [])


def test_a_streamed_second_pass_answering_unusable_json_counts_its_usage(app_url: str, up: Upstream) -> None:
    # An upstream that ignores `"stream": true` and answers JSON that is no completion: the draft stands, and the
    # second pass counts what it reported.
    up.script(
        {"content": "It is in Lyon.", "model": "api-model"},
        {"content": "Wrong city.", "model": "critic-model"},
        {"body": json.dumps(UNUSABLE[0]), "model": "api-model"},
    )
    client = sdk(OpenAI(base_url=f"{app_url}/v1", api_key="x", max_retries=0))
    chunks = list(client.chat.completions.create(model="e2e-critic", messages=QUESTION, stream=True))

    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == "It is in Lyon."
    assert chunks[-1].model_extra is not None
    ext = chunks[-1].model_extra["adapter_critic"]
    assert ext["degraded"] is True and "api_final_error" in ext["intermediate"]
    assert ext["tokens"]["stages"] == {"api_draft": DRAFT_USAGE, "critic": DRAFT_USAGE, "api_final": SPENT}
