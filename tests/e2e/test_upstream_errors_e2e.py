"""An upstream's error status on the first API call, as each official SDK sees it through real uvicorn (SPEC §7):
every 5xx (502 too, whose number happens to be the one the client gets) is this server's own `upstream_error`
naming the stage and the target, never the upstream's own envelope relayed; a 4xx is the upstream's, relayed as
it said it. Chat completions, Anthropic Messages and Responses, plain and streamed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from openai import OpenAI

from ..conftest import RemoteUpstream as Upstream
from ..conftest import run_server, sdk
from .test_e2e import start_app

QUESTION: list[Any] = [{"role": "user", "content": "Where is the Eiffel Tower?"}]
# What a proxy in front of a model says when the model is down: an OpenAI envelope of its own.
TROUBLE = '{"error": {"message": "upstream trouble", "type": "server_error", "param": null, "code": null}}'
TOO_LONG = '{"error": {"message": "context too long", "type": "invalid_request_error", "param": "messages"}}'

Call = Callable[[str, bool], None]


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with run_server(["-m", "tests.scripted_upstream"]) as (url, _):
        yield url


@pytest.fixture(scope="module")
def app_url(upstream_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with start_app(upstream_url, tmp_path_factory.mktemp("errors"), "errors") as (url, _):
        yield url


@pytest.fixture
def up(upstream_url: str) -> Upstream:
    return Upstream(upstream_url).reset()


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
