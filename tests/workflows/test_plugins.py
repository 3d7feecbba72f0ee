"""Workflows are plug-ins: the built-in modes are entry points, and a package installed beside adapter_critic
adds a mode with no change to it (`examples/workflow_plugin`, installed here into a directory of its own and
served by real uvicorn, driven with the official `openai` SDK)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import openai
import pytest

from adapter_critic import Config, ConfigError
from adapter_critic.workflows import registry

from ..conftest import RemoteUpstream, run_app, sdk

PLUGIN = Path(__file__).parents[2] / "examples" / "workflow_plugin"


def test_the_built_in_modes_are_registered_entry_points() -> None:
    names = {entry.name for entry in entry_points(group=registry.GROUP)}
    assert {"direct", "adapter", "critic", "advisor", "panel", "best_of_n"} <= names
    assert list(registry.workflows())[:6] == ["direct", "adapter", "critic", "advisor", "panel", "best_of_n"]


def test_an_unregistered_mode_is_refused_naming_the_registered_ones() -> None:
    data = {"served_models": {"m": {"mode": "shout", "api": {"model": "a", "base_url": "http://a.test/v1"}}}}
    with pytest.raises(ConfigError, match=r"served_models\.m\.mode: unknown mode 'shout'.*'direct'"):
        Config.from_dict(data)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plug-in installed (as pip installs it) into a directory put on the servers' PYTHONPATH."""
    target = tmp_path_factory.mktemp("plugin")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--target", str(target), str(PLUGIN)],
        check=True,
        capture_output=True,
    )
    return target


def test_the_installed_plugin_is_listed_with_the_built_in_modes(plugin_path: Path) -> None:
    code = "from adapter_critic.workflows import registry; print(','.join(registry.names()))"
    listed = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": str(plugin_path)}, capture_output=True, check=True
    )
    assert listed.stdout.decode().strip() == ",".join((*registry.LISTED_FIRST, "uppercase"))


@pytest.fixture(scope="module")
def served(
    plugin_path: Path, tmp_path_factory: pytest.TempPathFactory, upstream_url: str
) -> Iterator[tuple[str, RemoteUpstream]]:
    config = tmp_path_factory.mktemp("config") / "plugin.toml"
    api = f'{{ model = "api-model", base_url = "{upstream_url}/v1" }}'
    toml = (
        f'retries = 0\n[served_models.shouty]\nmode = "uppercase"\napi = {api}\n'
        f'[served_models.plain]\nmode = "direct"\napi = {api}\n'
    )
    with run_app(config, toml, PYTHONPATH=str(plugin_path)) as (url, _):
        yield url, RemoteUpstream(upstream_url)


@pytest.fixture
def client(served: tuple[str, RemoteUpstream]) -> openai.OpenAI:
    served[1].reset()
    return sdk(openai.OpenAI(base_url=f"{served[0]}/v1", api_key="unused", max_retries=0))


def test_a_plugin_mode_is_served(client: openai.OpenAI, served: tuple[str, RemoteUpstream]) -> None:
    served[1].script({"content": "it is in paris."})
    response = client.chat.completions.create(model="shouty", messages=[{"role": "user", "content": "Where?"}])
    assert response.choices[0].message.content == "IT IS IN PARIS."
    extension = response.model_extra["adapter_critic"]  # type: ignore[index]
    assert extension["mode"] == "uppercase"
    assert extension["intermediate"] == {"api_draft": "it is in paris.", "final": "IT IS IN PARIS."}
    assert list(extension["tokens"]["stages"]) == ["api"]


def test_a_request_may_ask_for_a_plugin_mode_and_stream_it(
    client: openai.OpenAI, served: tuple[str, RemoteUpstream]
) -> None:
    served[1].script({"content": "quiet answer"})
    stream = client.chat.completions.create(
        model="plain",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        extra_body={"x_adapter_critic": {"mode": "uppercase"}},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "QUIET ANSWER"
    assert chunks[-1].model_extra["adapter_critic"]["mode"] == "uppercase"  # type: ignore[index]
