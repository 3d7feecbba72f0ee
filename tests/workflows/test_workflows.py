"""Behaviour of the three workflows (SPEC §4-§6) through the ASGI app, against the scripted upstream.

Every test checks the exact sequence of upstream calls (model, host, path, headers, body) and the response.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from adapter_critic.workflows.edits import MAX_EDIT_BLOCKS
from adapter_critic.workflows.prompts import DEFAULT_ADAPTER_SYSTEM_PROMPT, DEFAULT_CRITIC_SYSTEM_PROMPT

from ..conftest import OTHER_URL, UPSTREAM_URL, AppFactory, chat, make_config
from ..helpers import block, post, target, usage
from ..scripted_upstream import Call, Reply, ScriptedUpstream

pytestmark = pytest.mark.anyio

API_KEY = "sk-api-0123456789"
ADAPTER_KEY = "sk-adapter-abcdef"
CRITIC_KEY = "sk-critic-xyz987"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
TOOL_CALLS = [
    {
        "id": "call_abc123",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
]
# Options a client may send; every one must reach the API-stage calls unchanged (and no reviewer call).
CLIENT_OPTIONS: dict[str, Any] = {
    "temperature": 0.3,
    "max_tokens": 50,
    "tools": TOOLS,
    "tool_choice": "auto",
    "response_format": {"type": "json_object"},
    "seed": 7,
    "stop": ["\n\n"],
    "top_k": 40,
    "logit_bias": {"50256": -100},
}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ADAPTER_KEY", ADAPTER_KEY)
    monkeypatch.setenv("CRITIC_KEY", CRITIC_KEY)


def message(data: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = data["choices"][0]["message"]
    return result


def assert_call(call: Call, *, model: str, host: str = "upstream.test", key: str | None = API_KEY) -> None:
    assert call.method == "POST"
    assert call.host == host
    assert call.path == "/v1/chat/completions"
    assert call.model == model
    assert call.headers.get("content-type") == "application/json"
    if key is None:
        assert "authorization" not in call.headers
    else:
        assert call.headers.get("authorization") == f"Bearer {key}"


# -- direct ---------------------------------------------------------------------------------------------------------


async def test_direct_one_call_with_request_options_forwarded_unchanged(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(content="Hi there!", finish_reason="length", usage=usage(4, 5)))
    body = chat("m-direct", "Hello", **CLIENT_OPTIONS)
    async with serve() as client:
        data = await post(client, body)

    assert len(upstream.calls) == 1
    call = upstream.calls[0]
    assert_call(call, model="api-model")
    assert call.body == {"model": "api-model", "messages": [{"role": "user", "content": "Hello"}], **CLIENT_OPTIONS}
    assert message(data) == {"role": "assistant", "content": "Hi there!"}
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["adapter_critic"]["intermediate"] == {"api": "Hi there!"}
    assert data["usage"] == usage(4, 5)


async def test_direct_returns_tool_calls_and_finish_reason_as_upstream_gave(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(content=None, tool_calls=TOOL_CALLS, finish_reason="tool_calls"))
    async with serve() as client:
        data = await post(client, chat("m-direct", "Weather in Paris?", tools=TOOLS))

    assert message(data) == {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    assert upstream.calls[0].body["tools"] == TOOLS


async def test_request_options_are_laid_over_target_options_request_wins(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    cfg = make_config(
        served_models={
            "m-direct": {"mode": "direct", "api": target("api-model", options={"temperature": 0, "max_tokens": 100})}
        }
    )
    async with serve(cfg) as client:
        await post(client, chat("m-direct", temperature=0.9))

    assert upstream.calls[0].body == {
        "model": "api-model",
        "messages": [{"role": "user", "content": "Hello"}],
        "temperature": 0.9,
        "max_tokens": 100,
    }


async def test_overrides_and_extra_body_are_never_forwarded_but_extra_body_keys_are(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    body = chat(
        "m-direct",
        seed=2,
        x_adapter_critic={"mode": "direct"},
        extra_body={"repetition_penalty": 1.1, "seed": 1, "x_adapter_critic": {"mode": "critic"}},
    )
    async with serve() as client:
        data = await post(client, body)

    # The top-level override wins over extra_body's, so this stays a direct run: one call.
    assert data["adapter_critic"]["mode"] == "direct"
    assert len(upstream.calls) == 1
    assert upstream.calls[0].body == {
        "model": "api-model",
        "messages": [{"role": "user", "content": "Hello"}],
        "seed": 2,
        "repetition_penalty": 1.1,
    }


async def test_unknown_message_fields_are_forwarded_unchanged(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    messages = [
        {"role": "system", "content": "Be brief.", "name": "boss"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS},
        {"role": "tool", "tool_call_id": "call_abc123", "content": "18C"},
        {"role": "user", "content": "And tomorrow?", "x_vendor_flag": True},
    ]
    async with serve() as client:
        await post(client, {"model": "m-direct", "messages": messages, "tools": TOOLS})

    assert upstream.calls[0].body == {"model": "api-model", "messages": messages, "tools": TOOLS}


async def test_no_authorization_when_key_env_unset_and_client_authorization_never_forwarded(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "")
    async with serve() as client:
        response = await client.post(
            "/chat/completions", json=chat("m-direct"), headers={"Authorization": "Bearer client-own-token"}
        )
    assert response.status_code == 200
    assert_call(upstream.calls[0], model="api-model", key=None)
    assert "client-own-token" not in json.dumps(upstream.calls[0].headers)


async def test_key_is_read_at_call_time(
    serve: AppFactory, upstream: ScriptedUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve() as client:
        await post(client, chat("m-direct"))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-rotated")
        await post(client, chat("m-direct"))
    assert [c.headers.get("authorization") for c in upstream.calls] == [f"Bearer {API_KEY}", "Bearer sk-rotated"]


# -- adapter --------------------------------------------------------------------------------------------------------

ADAPTER_CONFIG = {
    "mode": "adapter",
    "api": target("api-model", options={"temperature": 0.7}),
    "adapter": target("adapter-model", api_key_env="ADAPTER_KEY", options={"temperature": 0}),
}


@pytest.mark.parametrize(
    "reply", ["lgtm", "LGTM", "lgtm.", "LGTM!", "`lgtm`", "**LGTM**", "```\nlgtm\n```", " 'lgtm' "]
)
async def test_adapter_lgtm_variants_keep_the_draft(serve: AppFactory, upstream: ScriptedUpstream, reply: str) -> None:
    upstream.script(Reply(content="The draft."), Reply(content=reply))
    async with serve() as client:
        data = await post(client, chat("m-adapter"))

    assert message(data)["content"] == "The draft."
    assert data["adapter_critic"]["intermediate"] == {
        "api_draft": "The draft.",
        "adapter": reply,
        "final": "The draft.",
    }
    assert len(upstream.calls) == 2


async def test_adapter_calls_and_bodies(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    draft = "The capital of Australia is Sydney."
    upstream.script(Reply(content=draft, finish_reason="length"), Reply(content="lgtm"))
    body = chat("m-adapter", "What is the capital of Australia?", **CLIENT_OPTIONS)
    async with serve(make_config(served_models={"m-adapter": ADAPTER_CONFIG})) as client:
        data = await post(client, body)

    api, adapter = upstream.calls
    assert_call(api, model="api-model")
    assert api.body == {
        "model": "api-model",
        "messages": [{"role": "user", "content": "What is the capital of Australia?"}],
        **CLIENT_OPTIONS,
    }
    # The reviewer: its own key and options only, none of the client's (no tools, temperature, response_format…).
    assert_call(adapter, model="adapter-model", key=ADAPTER_KEY)
    assert set(adapter.body) == {"model", "messages", "temperature"}
    assert adapter.body["temperature"] == 0
    system, user = adapter.messages
    assert system == {"role": "system", "content": DEFAULT_ADAPTER_SYSTEM_PROMPT}
    assert user["role"] == "user"
    assert "What is the capital of Australia?" in user["content"]
    assert draft in user["content"]
    assert data["choices"][0]["finish_reason"] == "length"


async def test_adapter_edits_are_applied_to_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    draft = "Facts:\nThe capital of Australia is Sydney.\nIt has many kangaroos."
    edit = (
        "```\n<<<<<<< SEARCH\nThe capital of Australia is Sydney.\n=======\nThe capital of Australia is Canberra.\n"
        ">>>>>>> REPLACE\n<<<<<<< SEARCH\nIt has many kangaroos.\n=======\n>>>>>>> REPLACE\n```"
    )
    upstream.script(Reply(content=draft, finish_reason="stop"), Reply(content=edit))
    async with serve() as client:
        data = await post(client, chat("m-adapter"))

    final = "Facts:\nThe capital of Australia is Canberra."
    assert message(data) == {"role": "assistant", "content": final}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["adapter_critic"]["intermediate"] == {"api_draft": draft, "adapter": edit, "final": final}


async def test_adapter_retries_with_feedback_until_a_valid_reply(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    draft = "Two plus two is five."
    bad_block = "<<<<<<< SEARCH\nthree\n=======\nfour\n>>>>>>> REPLACE"
    good_block = "<<<<<<< SEARCH\nfive\n=======\nfour\n>>>>>>> REPLACE"
    upstream.script(
        Reply(content=draft, usage=usage(10, 5)),
        Reply(content="Looks mostly fine to me.", usage=usage(100, 1)),
        Reply(content=bad_block, usage=usage(200, 2)),
        Reply(content=good_block, usage=usage(300, 3)),
    )
    cfg = make_config(served_models={"m-adapter": {**ADAPTER_CONFIG, "max_adapter_retries": 2}})
    async with serve(cfg) as client:
        data = await post(client, chat("m-adapter"))

    assert [c.model for c in upstream.calls] == ["api-model", "adapter-model", "adapter-model", "adapter-model"]
    first, second, third = (c.messages for c in upstream.calls[1:])
    assert len(first) == 2
    # Each retry shows the previous conversation, the adapter's own reply and what was wrong with it.
    assert second[:2] == first
    assert second[2] == {"role": "assistant", "content": "Looks mostly fine to me."}
    assert second[3]["role"] == "user"
    assert "neither 'lgtm' nor SEARCH/REPLACE" in second[3]["content"]
    assert third[:4] == second
    assert third[4] == {"role": "assistant", "content": bad_block}
    assert third[5]["role"] == "user"
    assert "SEARCH text not found" in third[5]["content"]
    for call in upstream.calls[1:]:
        assert set(call.body) == {"model", "messages", "temperature"}
        assert_call(call, model="adapter-model", key=ADAPTER_KEY)

    assert message(data)["content"] == "Two plus two is four."
    ext = data["adapter_critic"]
    assert ext["intermediate"] == {"api_draft": draft, "adapter": good_block, "final": "Two plus two is four."}
    assert ext["tokens"]["stages"] == {"api": usage(10, 5), "adapter": usage(600, 6)}
    assert data["usage"] == usage(610, 11)


async def test_adapter_retries_exhausted_return_the_draft_with_rejection_reason(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(Reply(content="The draft."), Reply(content="nope"), Reply(content="still nope"))
    cfg = make_config(served_models={"m-adapter": {**ADAPTER_CONFIG, "max_adapter_retries": 1}})
    async with serve(cfg) as client:
        data = await post(client, chat("m-adapter"))

    assert len(upstream.calls) == 3
    assert message(data)["content"] == "The draft."
    intermediate = data["adapter_critic"]["intermediate"]
    assert set(intermediate) == {"api_draft", "adapter", "final", "adapter_rejection_reason"}
    assert intermediate["adapter"] == "still nope"
    assert intermediate["final"] == "The draft."
    assert "neither 'lgtm' nor SEARCH/REPLACE" in intermediate["adapter_rejection_reason"]
    assert "degraded" not in data["adapter_critic"]
    assert data["adapter_critic"]["tokens"]["stages"]["adapter"] == usage(2, 4)


async def test_adapter_no_retry_by_default(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="The draft."), Reply(content="nope"))
    async with serve() as client:
        data = await post(client, chat("m-adapter"))
    assert len(upstream.calls) == 2
    assert message(data)["content"] == "The draft."
    assert "adapter_rejection_reason" in data["adapter_critic"]["intermediate"]


async def test_adapter_retries_can_be_set_by_request_override(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="The draft."), Reply(content="nope"), Reply(content="LGTM"))
    async with serve() as client:
        data = await post(client, chat("m-adapter", x_adapter_critic={"max_adapter_retries": 1}))
    assert len(upstream.calls) == 3
    assert "adapter_rejection_reason" not in data["adapter_critic"]["intermediate"]
    assert data["adapter_critic"]["intermediate"]["adapter"] == "LGTM"


async def test_adapter_keeps_draft_tool_calls_and_shows_them_as_json(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    edit = "<<<<<<< SEARCH\nLet me look.\n=======\nLet me check the weather.\n>>>>>>> REPLACE"
    upstream.script(
        Reply(content="Let me look.", tool_calls=TOOL_CALLS, finish_reason="tool_calls"), Reply(content=edit)
    )
    async with serve() as client:
        data = await post(client, chat("m-adapter", "Weather in Paris?", tools=TOOLS, tool_choice="auto"))

    assert message(data) == {"role": "assistant", "content": "Let me check the weather.", "tool_calls": TOOL_CALLS}
    assert data["choices"][0]["finish_reason"] == "tool_calls"
    intermediate = data["adapter_critic"]["intermediate"]
    rendered = intermediate["api_draft_tool_calls"]
    assert json.loads(rendered) == TOOL_CALLS
    adapter = upstream.calls[1]
    assert rendered in adapter.messages[1]["content"]
    assert "tools" not in adapter.body and "tool_choice" not in adapter.body
    assert set(intermediate) == {"api_draft", "api_draft_tool_calls", "adapter", "final"}


async def test_adapter_custom_prompt_replaces_default(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    cfg = make_config(served_models={"m-adapter": {**ADAPTER_CONFIG, "adapter_system_prompt": "Say lgtm. Always."}})
    upstream.script(Reply(content="d"), Reply(content="lgtm"))
    async with serve(cfg) as client:
        await post(client, chat("m-adapter"))
    assert upstream.calls[1].messages[0] == {"role": "system", "content": "Say lgtm. Always."}


async def test_adapter_missing_target_falls_back_to_api_target(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    cfg = make_config(
        served_models={
            "m-adapter": {
                "mode": "adapter",
                "api": target("api-model", OTHER_URL, api_key_env="ADAPTER_KEY", options={"temperature": 0.1}),
            }
        }
    )
    upstream.script(Reply(content="d"), Reply(content="lgtm"))
    async with serve(cfg) as client:
        await post(client, chat("m-adapter", temperature=0.9, tools=TOOLS))

    api, adapter = upstream.calls
    assert_call(api, model="api-model", host="other.test", key=ADAPTER_KEY)
    assert api.body["temperature"] == 0.9
    assert_call(adapter, model="api-model", host="other.test", key=ADAPTER_KEY)
    assert set(adapter.body) == {"model", "messages", "temperature"}
    assert adapter.body["temperature"] == 0.1


async def test_reviewer_target_wholly_from_override_gets_no_options(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    cfg = make_config(
        served_models={"m-direct": {"mode": "direct", "api": target("api-model", options={"temperature": 0.1})}}
    )
    overrides = {"mode": "adapter", "adapter_model": "override-adapter", "adapter_base_url": UPSTREAM_URL + "/"}
    upstream.script(Reply(content="d"), Reply(content="lgtm"))
    async with serve(cfg) as client:
        data = await post(client, chat("m-direct", temperature=0.9, x_adapter_critic=overrides))

    assert data["adapter_critic"]["mode"] == "adapter"
    api, adapter = upstream.calls
    assert api.body["temperature"] == 0.9
    # Its URL is a configured one, so it gets that target's key; but no options: none were configured for it.
    assert_call(adapter, model="override-adapter")
    assert set(adapter.body) == {"model", "messages"}


# -- critic ---------------------------------------------------------------------------------------------------------

CRITIC_CONFIG = {
    "mode": "critic",
    "api": target("api-model", options={"max_tokens": 500}),
    "critic": target("critic-model", OTHER_URL, api_key_env="CRITIC_KEY", options={"temperature": 0}),
}
CONVERSATION = [
    {"role": "system", "content": "You are a terse geography tutor."},
    {"role": "user", "content": "Name a big city in Australia."},
    {"role": "assistant", "content": "Sydney."},
    {"role": "user", "content": "What is the capital of Australia?"},
]


async def test_critic_calls_and_bodies(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    draft = "The capital is Sydney."
    critique = "- Wrong: the capital is Canberra."
    upstream.script(
        Reply(content=draft, usage=usage(1, 1)),
        Reply(content=critique, usage=usage(2, 2)),
        Reply(content="The capital is Canberra.", finish_reason="stop", usage=usage(3, 3)),
    )
    body = {"model": "m-critic", "messages": CONVERSATION, **CLIENT_OPTIONS}
    async with serve(make_config(served_models={"m-critic": CRITIC_CONFIG})) as client:
        data = await post(client, body)

    draft_call, critic_call, second = upstream.calls
    assert_call(draft_call, model="api-model")
    assert draft_call.body == {"model": "api-model", "messages": CONVERSATION, **CLIENT_OPTIONS, "max_tokens": 50}

    assert_call(critic_call, model="critic-model", host="other.test", key=CRITIC_KEY)
    assert critic_call.body["temperature"] == 0
    assert set(critic_call.body) == {"model", "messages", "temperature"}
    system, user = critic_call.messages
    assert system == {"role": "system", "content": DEFAULT_CRITIC_SYSTEM_PROMPT}
    assert user["role"] == "user"
    for text in ("You are a terse geography tutor.", "Name a big city in Australia.", "Sydney.", "capital", draft):
        assert text in user["content"]

    assert_call(second, model="api-model")
    assert {k: v for k, v in second.body.items() if k != "messages"} == {"model": "api-model", **CLIENT_OPTIONS}
    assert second.messages[:4] == CONVERSATION
    assert second.messages[4] == {"role": "assistant", "content": draft}
    assert second.messages[5]["role"] == "user"
    assert critique in second.messages[5]["content"]
    assert len(second.messages) == 6
    assert all(m["role"] != "system" for m in second.messages[4:])

    assert message(data) == {"role": "assistant", "content": "The capital is Canberra."}
    assert data["adapter_critic"]["intermediate"] == {
        "api_draft": draft,
        "critic": critique,
        "final": "The capital is Canberra.",
    }
    assert data["adapter_critic"]["tokens"]["stages"] == {
        "api_draft": usage(1, 1),
        "critic": usage(2, 2),
        "api_final": usage(3, 3),
    }


async def test_critic_without_system_prompt(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        await post(client, chat("m-critic", "Hi"))
    assert [c.model for c in upstream.calls] == ["api-model", "critic-model", "api-model"]
    assert all(m["role"] != "system" for m in upstream.calls[2].messages)


async def test_critic_draft_tool_calls_rendered_as_text_never_structured(
    serve: AppFactory, upstream: ScriptedUpstream
) -> None:
    upstream.script(
        Reply(content="Checking.", tool_calls=TOOL_CALLS, finish_reason="tool_calls"),
        Reply(content="- Fine."),
        Reply(content="Checking the weather.", finish_reason="stop"),
    )
    async with serve() as client:
        data = await post(client, chat("m-critic", "Weather in Paris?", tools=TOOLS))

    rendered = data["adapter_critic"]["intermediate"]["api_draft_tool_calls"]
    assert json.loads(rendered) == TOOL_CALLS
    critic_call, second = upstream.calls[1:]
    assert rendered in critic_call.messages[1]["content"]
    assistant = second.messages[1]
    assert set(assistant) == {"role", "content"}
    assert assistant["role"] == "assistant"
    assert "Checking." in assistant["content"]
    assert rendered in assistant["content"]
    assert second.body["tools"] == TOOLS
    # The second pass's answer is the answer: no tool calls, its own finish_reason.
    assert message(data) == {"role": "assistant", "content": "Checking the weather."}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert set(data["adapter_critic"]["intermediate"]) == {"api_draft", "api_draft_tool_calls", "critic", "final"}


async def test_critic_second_pass_tool_calls_are_returned(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(content="It is sunny."),
        Reply(content="- Call the tool instead of guessing."),
        Reply(content=None, tool_calls=TOOL_CALLS, finish_reason="tool_calls"),
    )
    async with serve() as client:
        data = await post(client, chat("m-critic", "Weather in Paris?", tools=TOOLS, tool_choice="auto"))

    assert upstream.calls[2].body["tool_choice"] == "auto"
    assert message(data) == {"role": "assistant", "content": None, "tool_calls": TOOL_CALLS}
    assert data["choices"][0]["finish_reason"] == "tool_calls"


async def test_critic_custom_prompt_replaces_default(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    cfg = make_config(served_models={"m-critic": {**CRITIC_CONFIG, "critic_system_prompt": "Be harsh."}})
    async with serve(cfg) as client:
        await post(client, chat("m-critic"))
    assert upstream.calls[1].messages[0] == {"role": "system", "content": "Be harsh."}


async def test_critic_missing_target_falls_back_to_api_target(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    cfg = make_config(
        served_models={"m-critic": {"mode": "critic", "api": target("api-model", OTHER_URL, options={"top_p": 0.5})}}
    )
    async with serve(cfg) as client:
        await post(client, chat("m-critic", tools=TOOLS))

    for call in upstream.calls:
        assert_call(call, model="api-model", host="other.test")
    assert set(upstream.calls[1].body) == {"model", "messages", "top_p"}
    assert upstream.calls[1].body["top_p"] == 0.5
    assert upstream.calls[2].body["tools"] == TOOLS


def test_default_prompts_state_the_format_with_an_example() -> None:
    for marker in ("lgtm", "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "Example"):
        assert marker in DEFAULT_ADAPTER_SYSTEM_PROMPT
    # The adapter example is a complete, well-formed edit block.
    assert re.search(r"<<<<<<< SEARCH\n.+\n=======\n.+\n>>>>>>> REPLACE", DEFAULT_ADAPTER_SYSTEM_PROMPT)
    assert "for example" in DEFAULT_CRITIC_SYSTEM_PROMPT
    assert re.search(r"\n- .+\n- .+", DEFAULT_CRITIC_SYSTEM_PROMPT)


# -- response shape (§6) --------------------------------------------------------------------------------------------

STAGES = {
    "direct": ["api"],
    "adapter": ["api", "adapter"],
    "critic": ["api_draft", "critic", "api_final"],
}
INTERMEDIATE = {
    "direct": {"api"},
    "adapter": {"api_draft", "adapter", "final"},
    "critic": {"api_draft", "critic", "final"},
}


@pytest.mark.parametrize("mode", ["direct", "adapter", "critic"])
async def test_response_shape(serve: AppFactory, upstream: ScriptedUpstream, mode: str) -> None:
    usages = [usage(3, 4), usage(50, 60), usage(700, 800)]
    upstream.script(
        Reply(content="first", usage=usages[0]),
        Reply(content="lgtm" if mode == "adapter" else "second", usage=usages[1]),
        Reply(content="third", usage=usages[2]),
    )
    before = int(time.time())
    async with serve() as client:
        data = await post(client, chat(f"m-{mode}"))
    after = int(time.time())

    stages = STAGES[mode]
    assert set(data) == {"id", "object", "created", "model", "choices", "usage", "adapter_critic"}
    assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]+", data["id"])
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int) and before <= data["created"] <= after
    assert data["model"] == f"m-{mode}"
    assert data["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": {"direct": "first", "adapter": "first"}.get(mode, "third")},
            "finish_reason": "stop",
        }
    ]
    ext = data["adapter_critic"]
    assert set(ext) == {"mode", "intermediate", "tokens", "timings_ms", "targets", "run_id"}
    assert ext["mode"] == mode
    assert ext["run_id"] == data["id"]  # the run's id: its record in the run store
    # Which target answered each stage (a fallback's, after failures: tests/upstream/test_resilience.py).
    models = {"api": "api-model", "api_draft": "api-model", "api_final": "api-model", "adapter": "adapter-model"}
    assert ext["targets"] == {s: f"{models.get(s, 'critic-model')}@{UPSTREAM_URL}" for s in stages}
    assert set(ext["intermediate"]) == INTERMEDIATE[mode]
    assert list(ext["tokens"]["stages"]) == stages
    assert ext["tokens"]["stages"] == dict(zip(stages, usages, strict=False))
    expected_total = {
        field: sum(u[field] for u in usages[: len(stages)])
        for field in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    assert ext["tokens"]["total"] == expected_total
    assert data["usage"] == expected_total
    assert set(ext["timings_ms"]) == {*stages, "total"}
    for value in ext["timings_ms"].values():
        assert isinstance(value, int | float) and not isinstance(value, bool)
        assert value >= 0
    assert ext["timings_ms"]["total"] >= max(ext["timings_ms"][s] for s in stages)
    assert len(upstream.calls) == len(stages)


async def test_stage_without_usage_counts_zeros(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(
        Reply(content="d", usage=usage(1, 2)), Reply(content="c", usage=None), Reply(content="f", usage=usage(10, 20))
    )
    async with serve() as client:
        data = await post(client, chat("m-critic"))
    tokens = data["adapter_critic"]["tokens"]
    assert tokens["stages"]["critic"] == usage(0, 0)
    assert tokens["total"] == usage(11, 22) == data["usage"]


async def test_timings_reflect_wall_clock(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    upstream.script(Reply(content="d", delay=0.05), Reply(content="lgtm"))
    async with serve() as client:
        data = await post(client, chat("m-adapter"))
    timings = data["adapter_critic"]["timings_ms"]
    assert timings["api"] >= 50
    assert timings["total"] >= timings["api"] + timings["adapter"]


async def test_ids_are_unique(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    async with serve() as client:
        first = await post(client, chat("m-direct"))
        second = await post(client, chat("m-direct"))
    assert first["id"] != second["id"]
    assert first["id"] != "chatcmpl-upstream"


# -- adapter limits ----------------------------------------------------------------------------------------------------


async def test_adapter_reply_over_the_limits_leaves_the_draft(serve: AppFactory, upstream: ScriptedUpstream) -> None:
    draft = "\n".join(f"line {i}" for i in range(200))
    upstream.script(Reply(draft), Reply("".join(block(f"line {i}") for i in range(MAX_EDIT_BLOCKS + 1))))
    async with serve() as client:
        response = await client.post("/chat/completions", json=chat("m-adapter"))
    assert response.status_code == 200
    body = response.json()
    assert body["choices"][0]["message"]["content"] == draft
    assert "more than 100 edit blocks" in body["adapter_critic"]["intermediate"]["adapter_rejection_reason"]
