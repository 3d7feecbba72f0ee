"""A plug-in workflow's stage target and settings are overridden per request like a built-in one's: the override
fields come from the registered workflows, so a mode registered by a package installed beside adapter_critic
(here: written into a directory of its own, with its entry point, and served by real uvicorn) gets
`<target>_model` / `<target>_base_url` and its `RequestSettings` in `x_adapter_critic`, checked as the config is.
Driven with the official `openai` SDK against the scripted upstream, which echoes the model it was asked for and
the last user text."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from ..conftest import RemoteUpstream, run_app, sdk

PLUGIN = '''
from typing import Annotated

import msgspec

from adapter_critic import Answer, FinalCall, RunContext, Workflow


class RewriteSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    tone: str = "plain"
    passes: Annotated[int, msgspec.Meta(ge=1, le=3)] = 1


class RewriteRequestSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    tone: Annotated[str, msgspec.Meta(min_length=1)] | None = None


class Rewrite(Workflow):
    """The API model's draft, rewritten by the `rewriter` target in the served model's (or the request's) tone."""

    name = "rewrite"
    stages = ("api", "rewriter")
    targets = ("rewriter",)
    Settings = RewriteSettings
    RequestSettings = RewriteRequestSettings

    async def run(self, run: RunContext) -> FinalCall | None:
        draft = await run.first_call("api", run.request.messages_json)
        run.set_answer(Answer.of(draft))
        text = f"[{run.plan.settings.tone}] {draft.content}"
        rewritten = await run.review_call("rewriter", run.plan.target("rewriter"), [{"role": "user", "content": text}])
        if rewritten is not None:
            run.set_answer(Answer.of(rewritten))
        return None
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in registered as an installed package is: its module and its distribution's entry point."""
    target = tmp_path_factory.mktemp("rewrite_plugin")
    (target / "rewrite_plugin.py").write_text(PLUGIN)
    info = target / "rewrite_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rewrite-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[adapter_critic.workflows]\nrewrite = rewrite_plugin:Rewrite\n")
    return target


@pytest.fixture(scope="module")
def served(
    plugin_path: Path, tmp_path_factory: pytest.TempPathFactory, upstream_url: str
) -> Iterator[tuple[str, RemoteUpstream]]:
    config = tmp_path_factory.mktemp("config") / "rewrite.toml"
    toml = textwrap.dedent(f"""\
        retries = 0
        [served_models.tidy]
        mode = "rewrite"
        tone = "plain"
        api = {{ model = "api-model", base_url = "{upstream_url}/v1" }}
        rewriter = {{ model = "rewriter-model", base_url = "{upstream_url}/v1" }}
    """)
    with run_app(config, toml, PYTHONPATH=str(plugin_path)) as (url, _):
        yield url, RemoteUpstream(upstream_url)


@pytest.fixture
def client(served: tuple[str, RemoteUpstream]) -> openai.OpenAI:
    served[1].reset()
    return sdk(openai.OpenAI(base_url=f"{served[0]}/v1", api_key="unused", max_retries=0))


def ask(client: openai.OpenAI, overrides: dict[str, Any] | None = None) -> Any:
    extra = {"x_adapter_critic": overrides} if overrides is not None else None
    return client.chat.completions.create(model="tidy", messages=[{"role": "user", "content": "Hi"}], extra_body=extra)


def test_the_plugin_runs_with_its_configured_target_and_settings(
    client: openai.OpenAI, served: tuple[str, RemoteUpstream]
) -> None:
    response = ask(client)
    assert response.choices[0].message.content == "echo rewriter-model: [plain] echo api-model: Hi"
    assert served[1].models() == ["api-model", "rewriter-model"]


def test_a_request_overrides_the_plugins_target_and_setting(
    client: openai.OpenAI, served: tuple[str, RemoteUpstream]
) -> None:
    response = ask(client, {"rewriter_model": "other-rewriter", "tone": "pirate"})
    assert response.choices[0].message.content == "echo other-rewriter: [pirate] echo api-model: Hi"
    assert served[1].models() == ["api-model", "other-rewriter"]
    extension = response.model_extra["adapter_critic"]  # type: ignore[index]
    assert extension["mode"] == "rewrite"
    assert extension["targets"]["rewriter"].startswith("other-rewriter@")


@pytest.mark.parametrize(
    ("overrides", "param", "said"),
    [
        ({"tone": 3}, "x_adapter_critic.tone", "Expected `str | null`, got `int`"),
        ({"tone": ""}, "x_adapter_critic.tone", "length >= 1"),
        ({"rewriter_model": 5}, "x_adapter_critic.rewriter_model", "got `int`"),
        ({"passes": 2}, "x_adapter_critic.passes", "unknown field `passes`"),  # a setting it keeps the operator's
        ({"rewriter_url": "x"}, "x_adapter_critic.rewriter_url", "unknown field `rewriter_url`"),
        # The plug-in's target is held to the server's override allowlist like a built-in one.
        ({"rewriter_base_url": "http://evil.test/v1"}, "x_adapter_critic.rewriter_base_url", "not an allowed"),
    ],
)
def test_a_bad_override_of_the_plugin_is_a_400_naming_its_path(
    client: openai.OpenAI, served: tuple[str, RemoteUpstream], overrides: dict[str, Any], param: str, said: str
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        ask(client, overrides)
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["param"] == param
    assert f"`{param}`" in error["message"] and said in error["message"]
    assert served[1].calls() == []


def test_an_unknown_override_lists_the_plugins_fields(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        ask(client, {"bogus": 1})
    message = raised.value.body["message"]  # type: ignore[index]
    for field in ("rewriter_model", "rewriter_base_url", "tone", "max_adapter_retries"):
        assert field in message
