"""Everything under `examples/` works as the README says: every config loads, and both apps serve."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import openai
import pytest

from adapter_critic import load_config
from adapter_critic.evals.dataset import load_dataset
from adapter_critic.evals.scorers import make_scorer
from adapter_critic.workflows.registry import LISTED_FIRST
from adapter_critic.workflows.voting import extractor

from ..conftest import asgi_client, run_server, sdk

EXAMPLES = Path(__file__).parents[2] / "examples"
CONFIGS = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".toml", ".json", ".yaml", ".yml"))
MODES = {"direct", "adapter", "critic"}
# The configs of one workflow each, some beside a `direct` baseline (the others show the first three modes together).
ONE_MODE = {
    "advisor.toml": {"advisor"},
    "panel.toml": {"panel"},
    "best_of_n.toml": {"best_of_n"},
    "self_consistency.toml": {"direct", "self_consistency"},
    "self_refine.toml": {"self_refine"},
    "re2.toml": {"direct", "re2"},
    "mixture_of_agents.toml": {"mixture_of_agents"},
    "chain_of_verification.toml": {"chain_of_verification"},
    # Every built-in workflow on one small local model (tests/real, benchmarks/realmodel.py, the getting-started).
    "smollm2.toml": set(LISTED_FIRST),
    # A critic that learns, on the built-in demo model (docs/guides/learning.md).
    "learning.toml": {"direct", "critic"},
    # An auto model over three techniques, and a shadow (docs/guides/routing.md).
    "routing.toml": {"direct", "auto"},
}
DEMO_MODEL_CONFIGS = {"learning.toml"}  # they name the demo model, which the standalone server answers in-process


def test_the_examples_folder_has_every_documented_config() -> None:
    names = {p.name for p in CONFIGS}
    assert {"vllm.toml", "llamacpp.toml", "ollama.toml", "openai.toml", "compat.json", *ONE_MODE} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_example_config_loads_and_uses_its_modes(path: Path) -> None:
    config = load_config(path)
    assert {served.kind for served in config.served_models.values()} == ONE_MODE.get(path.name, MODES)
    for served in config.served_models.values():
        for target in (served.api, *served.targets.values()):
            # Every example is a sidecar config: absolute URLs only (relative ones need the middleware), but the demo
            # model's, which the standalone server and the command line answer in-process.
            demo = path.name in DEMO_MODEL_CONFIGS and target is not None and target.base_url == "/demo/v1"
            assert target is None or demo or target.base_url.startswith(("http://", "https://"))


def test_local_server_configs_never_send_an_openai_key() -> None:
    """A local server's key variable is its own, so an OPENAI_API_KEY in the shell stays out of its requests."""
    for name in ("vllm.toml", "llamacpp.toml", "ollama.toml", "smollm2.toml"):
        config = load_config(EXAMPLES / name)
        assert {config.key_env_for(t) for t in config.targets()}.isdisjoint({"OPENAI_API_KEY"}), name


def test_openai_example_binds_its_key_to_openai() -> None:
    config = load_config(EXAMPLES / "openai.toml")
    assert {(t.url, config.key_env_for(t)) for t in config.targets()} == {
        ("https://api.openai.com/v1", "OPENAI_API_KEY")
    }


def test_compat_json_reads_the_api_key_var_alias() -> None:
    config = load_config(EXAMPLES / "compat.json")
    served = config.served_models["served-critic"]
    assert served.api.api_key_env == "LOCAL_API_KEY"
    assert served.targets["critic"].api_key_env == "OPENAI_API_KEY"


def load_example(name: str) -> ModuleType:
    """Import `examples/<name>.py` as a fresh module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.anyio
async def test_fastapi_example_serves_the_api_under_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADAPTER_CRITIC_CONFIG", raising=False)  # the default: vllm.toml next to the example
    module = load_example("fastapi_mount")
    service = module.chat.state.adapter_critic
    async with asgi_client(module.app) as client:
        assert service.upstream.is_open  # the parent's lifespan entered the mounted app's
        health = await client.get("/v1/health")
        models = await client.get("/v1/models")
        index = await client.get("/")
    assert not service.upstream.is_open  # and closed it at shutdown

    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert [m["id"] for m in models.json()["data"]] == ["qwen", "qwen-adapter", "qwen-critic"]
    assert index.json()["chat_completions"] == "/v1/chat/completions"


@pytest.mark.anyio
async def test_fastapi_example_reads_its_config_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADAPTER_CRITIC_CONFIG", str(EXAMPLES / "ollama.toml"))
    module = load_example("fastapi_mount")
    async with asgi_client(module.app) as client:
        models = await client.get("/v1/models")
    assert [m["id"] for m in models.json()["data"]] == ["llama", "llama-adapter", "llama-critic"]


def chat(model: str, content: str = "hi") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


@pytest.mark.anyio
async def test_middleware_example_runs_every_mode_in_process() -> None:
    module = load_example("middleware_wrap")
    async with asgi_client(module.app) as client:
        direct = await client.post("/v1/chat/completions", json=chat("toy-direct"))
        adapter = await client.post("/v1/chat/completions", json=chat("toy-adapter"))
        critic = await client.post("/v1/chat/completions", json=chat("toy-critic-loop"))

    assert direct.status_code == 200, direct.text
    assert direct.json()["model"] == "toy-direct"
    assert direct.json()["choices"][0]["message"]["content"] == "Echo: hi"

    assert adapter.status_code == 200, adapter.text
    body = adapter.json()
    assert body["choices"][0]["message"]["content"] == "Echo (proofread): hi"
    assert body["adapter_critic"]["intermediate"]["api_draft"] == "Echo: hi"
    assert body["adapter_critic"]["intermediate"]["adapter"] == module.PROOFREAD
    assert body["usage"] == body["adapter_critic"]["tokens"]["total"]

    assert critic.status_code == 200, critic.text
    extension = critic.json()["adapter_critic"]
    assert extension["mode"] == "critic"
    assert extension["intermediate"]["critic"] == module.CRITIQUE
    assert set(extension["tokens"]["stages"]) == {"api_draft", "critic", "api_final"}


@pytest.mark.anyio
async def test_middleware_example_passes_other_models_to_the_wrapped_server() -> None:
    module = load_example("middleware_wrap")
    async with asgi_client(module.app) as client:
        echo = await client.post("/v1/chat/completions", json=chat("echo", "straight through"))
    assert echo.status_code == 200, echo.text
    assert echo.json()["model"] == "echo"
    assert echo.json()["choices"][0]["message"]["content"] == "Echo: straight through"
    assert "adapter_critic" not in echo.json()  # answered by the wrapped server, not the pipeline


@pytest.fixture(scope="module")
def middleware_example_url() -> Iterator[str]:
    args = ["-m", "uvicorn", "middleware_wrap:app", "--app-dir", str(EXAMPLES), "--log-level", "warning"]
    with run_server(args) as (url, _):
        yield url


def test_middleware_example_lists_its_models_through_the_sdk(middleware_example_url: str) -> None:
    client = sdk(openai.OpenAI(base_url=f"{middleware_example_url}/v1", api_key="unused", max_retries=0))
    # The toy server has no /v1/models of its own: the served models are listed alone.
    assert [model.id for model in client.models.list()] == ["toy-direct", "toy-adapter", "toy-critic-loop"]
    assert client.models.retrieve("toy-critic-loop").owned_by == "adapter-critic"


@pytest.mark.parametrize("model", ["toy-direct", "toy-adapter", "toy-critic-loop"])
def test_middleware_example_streams_every_mode(middleware_example_url: str, model: str) -> None:
    """The toy server answers JSON even to stream requests: the client still gets a proper stream."""
    client = sdk(openai.OpenAI(base_url=f"{middleware_example_url}/v1", api_key="unused", max_retries=0))
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ("Echo (proofread): hi" if model == "toy-adapter" else "Echo: hi")
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].choices == []


@pytest.mark.parametrize("name", sorted(ONE_MODE))
def test_workflow_examples_send_the_openai_key_only_to_openai(name: str) -> None:
    config = load_config(EXAMPLES / name)
    bindings = {(t.url, config.key_env_for(t)) for t in config.targets()}
    openai_url = "https://api.openai.com/v1"
    assert {env for url, env in bindings if url == openai_url} <= {"OPENAI_API_KEY"}
    assert all(env != "OPENAI_API_KEY" for url, env in bindings if url != openai_url)


EVAL = EXAMPLES / "eval"
# Each technique dataset: a right and a wrong answer of the shape it asks for, and how self_consistency reads them.
SHAPES = {
    "arithmetic.jsonl": ("1,000 is too many; so {expected}.", "1,000 is too many; so {expected}7.", "last_number"),
    "choice.jsonl": ("(A) is out.\nAnswer: {expected}", "(A) is out.\nAnswer: {other}", "choice"),
    "json.jsonl": ('{{"total": {total}}}', '{{"total": {more}}}', "json:total"),
}


@pytest.mark.parametrize("path", sorted(EVAL.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_eval_dataset_loads_with_its_scorers(path: Path) -> None:
    for item in load_dataset(path):
        if item.scorer is not None:
            assert make_scorer(item.scorer, judge=_no_judge).misses(item) is None, item.id


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(SHAPES))
async def test_technique_datasets_score_their_answers_as_self_consistency_reads_them(name: str) -> None:
    right_shape, wrong_shape, extract = SHAPES[name]
    for item in load_dataset(EVAL / name):
        assert item.scorer is not None
        scorer = make_scorer(item.scorer, judge=_no_judge)
        total = item.schema["properties"]["total"]["const"] if isinstance(item.schema, dict) else 0
        fields = {"expected": item.expected, "other": "A" if item.expected != "A" else "B", "total": total}
        right, wrong = right_shape.format(**fields, more=total + 1), wrong_shape.format(**fields, more=total + 1)
        assert (await scorer.grade(right, item))[0] == 1.0, item.id
        assert (await scorer.grade(wrong, item))[0] == 0.0, item.id
        assert extractor(extract)(right) == str(item.expected or total) != extractor(extract)(wrong)


async def _no_judge(model: str, messages: list[dict[str, Any]]) -> str:
    raise AssertionError("no dataset here is graded by a judge")
