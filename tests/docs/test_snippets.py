"""Every code block of README.md and docs/ works as written (see `snippets` for the directives).

- TOML: a config (a fragment such as `[store]` alone completed with one served model) loads through `Config`.
- JSON: parses; a config loads; a request body is sent to the demo and answered 200; an `adapter_critic` extension
  and a run record decode as the server's own; an error envelope has its fields; an eval dataset's lines load as
  items.
- YAML: parses; a config loads.
- Python: runs, against the demo served by real uvicorn; an `app` it builds is served and answers a chat request.
- Shell: runs with bash (`set -e`, every curl failing on an HTTP error) against the same demo; a `server` block's
  server is started and answers. `pip install` lines are not run (the test environment has the packages): the
  extras they name must exist.
- PromQL: every series it reads is one the demo server exposes.

A block marked `needs` is checked without running it: Python compiles and its imports exist, shell is valid bash
whose `adapter-critic` commands parse and whose `pip install`s name existing extras.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import click
import httpx
import msgspec
import pytest
import yaml

from adapter_critic import Config, Workflow, create_app
from adapter_critic.cli import cli
from adapter_critic.evals.dataset import parse_item
from adapter_critic.events import Extension
from adapter_critic.observe.metrics import Metrics
from adapter_critic.store import RunDetail, RunSummary
from adapter_critic.workflows import registry

from ..conftest import asgi_client, listening_socket, run_server
from ..real.llamaserver import LlamaServer, free_port
from .conftest import Demo, snippet_env
from .snippets import ROOT, Snippet, chain, collect_all

SNIPPETS = collect_all()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
SIDECAR = "127.0.0.1:9000"  # where the pages start a server of their own
REAL_SERVER = "127.0.0.1:8080"  # where docs/getting-started/real-model.md starts its model server
MINIMAL_SERVED = {"served_models": {"x": {"mode": "direct", "api": {"model": "m", "base_url": "http://h/v1"}}}}


def of(*langs: str) -> list[Any]:
    return [pytest.param(s, id=s.id) for s in SNIPPETS if s.lang in langs]


def test_the_docs_have_snippets_of_every_tested_kind() -> None:
    assert {s.lang for s in SNIPPETS} >= {"python", "toml", "json", "sh", "yaml", "promql"}
    assert len(SNIPPETS) > 50


# -- configs and data ----------------------------------------------------------------------------------------------


def load_config_data(data: dict[str, Any], where: str) -> Config:
    if "served_models" not in data:
        data = {**MINIMAL_SERVED, **data}
    return Config.from_dict(data, source=where)


@pytest.mark.parametrize("snippet", of("toml"))
def test_toml(snippet: Snippet) -> None:
    data = tomllib.loads(snippet.code)
    excerpt = snippet.directives.get("excerpt")
    if excerpt is not None:
        whole = tomllib.loads((ROOT / excerpt).read_text(encoding="utf-8"))
        assert_part_of(data, whole, excerpt)
        return
    config = load_config_data(data, snippet.id)
    for served in data.get("served_models", {}):
        assert served in config.served_models


def assert_part_of(part: Any, whole: Any, where: str) -> None:
    if isinstance(part, dict):
        assert isinstance(whole, dict), where
        for key, value in part.items():
            assert key in whole, f"{where}: no {key!r}"
            assert_part_of(value, whole[key], f"{where}.{key}")
    else:
        assert part == whole, where


@pytest.mark.parametrize("snippet", of("yaml"))
def test_yaml(snippet: Snippet) -> None:
    data = yaml.safe_load(snippet.code)
    assert data is not None
    if isinstance(data, dict) and "served_models" in data:
        load_config_data(data, snippet.id)


@pytest.mark.parametrize("snippet", of("json"))
def test_json(snippet: Snippet, request: pytest.FixtureRequest) -> None:
    if "dataset" in snippet.directives:
        items = [parse_item(line, n, snippet.id) for n, line in enumerate(snippet.code.splitlines(), 1) if line]
        assert items
        return
    data = json.loads(snippet.code)
    if isinstance(data, dict) and "served_models" in data:
        load_config_data(data, snippet.id)
    if isinstance(data, dict) and "adapter_critic" in data:
        extension = data["adapter_critic"]
        if "progress" in extension:  # a progress event's
            assert set(extension["progress"]) == {"stage", "status", "ms"}, snippet.id
        else:
            msgspec.convert(extension, Extension)
    if isinstance(data, dict) and data.get("object") == "run":
        msgspec.convert(data, RunDetail if "stages" in data else RunSummary)
    if isinstance(data, dict) and "error" in data and set(data) <= {"error", "type"}:  # an OpenAI or Anthropic envelope
        error = data["error"]
        assert isinstance(error, dict) and isinstance(error.get("message"), str) and "type" in error, snippet.id
    if "request" in snippet.directives:
        demo: Demo = request.getfixturevalue("demo")
        path = snippet.directives["request"] or "/v1/chat/completions"
        answer = httpx.post(f"{demo.url}{path}", json=data, timeout=60)
        assert answer.status_code == 200, answer.text


# -- Python --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("snippet", of("python"))
def test_python(snippet: Snippet, request: pytest.FixtureRequest) -> None:
    if snippet.needs is not None:
        check_python(snippet)
        return
    demo: Demo = request.getfixturevalue("demo")
    workdir: Path = request.getfixturevalue("workdir")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    for name in ("XDG_DATA_HOME", "RUN_ID"):  # the demo's run store, and a run in it
        monkeypatch.setenv(name, demo.env[name])
    namespace: dict[str, Any] = {"__name__": "__snippet__", **givens()}
    with contextlib.chdir(workdir), closing_clients(namespace), serving(snippet, demo) as localize:
        for block in chain(snippet, SNIPPETS):
            exec(compile(localize(block.code), block.id, "exec", dont_inherit=True), namespace)  # as a reader runs it
        app = namespace.get("app")
        if app is not None and callable(app):
            anyio.run(serve_once, app)
        for workflow in workflows_in(namespace):
            with registered(workflow):
                body = anyio.run(serve_once, create_app(workflow_config(workflow, demo)))
                assert body["adapter_critic"]["mode"] == workflow.name


def workflows_in(namespace: dict[str, Any]) -> list[type[Workflow]]:
    """The workflow plug-ins a block defines (not the ones it imports)."""
    return [
        value
        for value in namespace.values()
        if isinstance(value, type) and issubclass(value, Workflow) and value.__module__ == "__snippet__"
    ]


@contextlib.contextmanager
def registered(workflow: type[Workflow]) -> Iterator[None]:
    """A workflow a block defines, registered as if its package were installed, while the block's test runs."""
    known = registry.workflows()
    assert workflow.name not in known, workflow.name
    known[workflow.name] = workflow()
    try:
        yield
    finally:
        del known[workflow.name]


def workflow_config(workflow: type[Workflow], demo: Demo) -> Config:
    """One served model in the workflow's mode, every stage target on the demo's `demo-direct`."""
    target = {"model": "demo-direct", "base_url": f"{demo.url}/v1"}
    served = {"mode": workflow.name, "api": target, **dict.fromkeys(workflow.targets, target)}
    return Config.from_dict({"served_models": {f"plugin-{workflow.name}": served}})


@contextlib.contextmanager
def serving(snippet: Snippet, demo: Demo) -> Iterator[Callable[[str], str]]:
    """How to point a block at its server: the demo's address for 127.0.0.1:8000, and for an `against` block
    127.0.0.1:9000 is the app it names, served here by uvicorn on a socket of its own."""
    against = snippet.directives.get("against")
    if against is None:
        yield demo.localize
        return
    words = shlex.split(against)
    env = dict(demo.env)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the app
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    with run_server(["-m", "uvicorn", *words], env=env) as (url, _):
        address = url.removeprefix("http://")
        yield lambda code: demo.localize(code).replace(SIDECAR, address)


def givens() -> dict[str, Any]:
    """Names a snippet may use without defining them: `model_server`, the toy model server of
    examples/middleware_wrap.py."""
    spec = importlib.util.spec_from_file_location("middleware_wrap", ROOT / "examples" / "middleware_wrap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"model_server": module.model_server}


async def serve_once(app: Any) -> dict[str, Any]:
    """An app a snippet built serves `GET /v1/models` (`/models` when it is not mounted) and answers a chat request
    for the first model it lists."""
    async with asgi_client(app) as client:
        prefix = "/v1"
        models = await client.get(f"{prefix}/models")
        if models.status_code == 404:
            prefix = ""
            models = await client.get("/models")
        assert models.status_code == 200, models.text
        model = models.json()["data"][0]["id"]
        body = {"model": model, "messages": [{"role": "user", "content": "Hello"}]}
        answer = await client.post(f"{prefix}/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        assert "adapter_critic" in body
        return body


@contextlib.contextmanager
def closing_clients(namespace: dict[str, Any]) -> Iterator[None]:
    """Close the SDK clients a snippet made (and left open, as a short example does)."""
    try:
        yield
    finally:
        for value in namespace.values():
            if type(value).__module__.split(".")[0] in ("openai", "anthropic") and hasattr(value, "close"):
                value.close()


def check_python(snippet: Snippet) -> None:
    """It compiles, and what it imports from adapter_critic exists (other packages may not be installed here)."""
    tree = ast.parse(snippet.code, snippet.id)
    compile(tree, snippet.id, "exec")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "adapter_critic":
                    importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "adapter_critic":
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{snippet.id}: {node.module} has no {alias.name}"


# -- shell ---------------------------------------------------------------------------------------------------------

PRELUDE = """\
set -euo pipefail
curl() { command curl --fail-with-body --show-error --max-time 120 "$@"; }
"""


def commands(code: str) -> list[str]:
    """The block's command lines, comments and blank lines left out; a line continued with a backslash, or inside
    an open quote, is one command line."""
    found: list[str] = []
    pending = ""
    for line in re.sub(r"\\\n\s*", " ", code).splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote is still open
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            found.append(pending)
        pending = ""
    assert not pending, f"an unclosed quote: {pending!r}"
    return found


def is_install(line: str) -> bool:
    return bool(re.match(r"\s*(pip|python3? -m pip) install\b", line))


@pytest.mark.parametrize("snippet", of("sh"))
def test_shell(snippet: Snippet, request: pytest.FixtureRequest) -> None:
    check_shell(snippet)
    if snippet.needs is not None:
        return
    if "real-model" in snippet.directives:
        return  # run by test_real_model_shell
    demo: Demo = request.getfixturevalue("demo")
    workdir: Path = request.getfixturevalue("workdir")
    if "server" in snippet.directives:
        lines = [line for line in commands(demo.localize(snippet.code)) if not is_install(line)]
        run_server_snippet(snippet, lines, workdir, demo)
        return
    with contextlib.chdir(workdir), serving(snippet, demo) as localize:
        lines = [line for line in commands(localize(snippet.code)) if not is_install(line)]
        result = subprocess.run(
            ["bash", "-c", PRELUDE + "\n".join(lines)],
            cwd=workdir,
            env=demo.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, f"{snippet.id} failed:\n{result.stdout}\n{result.stderr}"


def run_server_snippet(snippet: Snippet, lines: list[str], workdir: Path, demo: Demo) -> None:
    """Run the block with its last command serving on a socket of ours (`--fd`); it must answer `GET /v1/models`."""
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    last = re.sub(r"(\s+#\s.*)?$", f" --fd {sock.fileno()}\\1", lines[-1], count=1)  # before a comment
    script = PRELUDE + "\n".join([*lines[:-1], last])
    server = subprocess.Popen(
        ["bash", "-c", script],
        cwd=workdir,
        env=demo.env,
        pass_fds=(sock.fileno(),),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the server and its workers in a process group of their own, stopped together
    )
    sock.close()
    try:
        answer = httpx.get(f"{url}/v1/models", timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["data"], answer.text
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    assert "Traceback" not in err, f"{snippet.id}:\n{out}\n{err}"


@pytest.mark.real_model
@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.id) for s in SNIPPETS if "real-model" in s.directives])
def test_real_model_shell(snippet: Snippet, llama: LlamaServer, tmp_path: Path) -> None:
    """A `real-model` block against the session's model server: where the page has it at 127.0.0.1:8080, in a
    working directory whose examples/smollm2.toml calls it; its `against` app started; a block that starts the
    server itself runs it on a free port, and the server must answer."""
    workdir = real_model_workdir(tmp_path, llama)
    env = snippet_env(tmp_path / "data")
    lines = [line.replace(REAL_SERVER, llama.address) for line in commands(snippet.code) if not is_install(line)]
    if "llama_cpp.server" in lines[-1]:
        port = free_port()
        last = "exec " + re.sub(r"--port\s+8080\b", f"--port {port}", lines[-1])
        with contextlib.chdir(workdir):
            server = LlamaServer(["bash", "-c", PRELUDE + "\n".join([*lines[:-1], last])], port, env=env)
        try:
            answer = httpx.get(f"{server.url}/v1/models", timeout=60)
            assert answer.status_code == 200 and answer.json()["data"], answer.text
        finally:
            server.stop()
        return
    with contextlib.chdir(workdir), real_app(snippet, env) as localize:
        result = subprocess.run(
            ["bash", "-c", PRELUDE + "\n".join(localize(line) for line in lines)],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert result.returncode == 0, f"{snippet.id} failed:\n{result.stdout}\n{result.stderr}"


def real_model_workdir(tmp_path: Path, llama: LlamaServer) -> Path:
    """The repository's `examples/`, with examples/smollm2.toml calling `llama`."""
    workdir = tmp_path / "work"
    examples = workdir / "examples"
    examples.mkdir(parents=True)
    for path in (ROOT / "examples").iterdir():
        if path.name != "smollm2.toml":
            (examples / path.name).symlink_to(path)
    config = (ROOT / "examples" / "smollm2.toml").read_text(encoding="utf-8")
    (examples / "smollm2.toml").write_text(config.replace(REAL_SERVER, llama.address), encoding="utf-8")
    return workdir


@contextlib.contextmanager
def real_app(snippet: Snippet, env: dict[str, str]) -> Iterator[Callable[[str], str]]:
    """The app of a block's `against` directive, serving in the working directory (none without one)."""
    against = snippet.directives.get("against")
    if against is None:
        yield lambda code: code
        return
    words = shlex.split(against)
    app_env = dict(env)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        name, _, value = words.pop(0).partition("=")
        app_env[name] = value
    with run_server(["-m", "uvicorn", *words], env=app_env) as (url, _):
        address = url.removeprefix("http://")
        yield lambda code: code.replace(SIDECAR, address)


def check_shell(snippet: Snippet) -> None:
    """Valid bash; `adapter-critic` commands parse; `pip install`s name existing extras; `uvicorn` apps import."""
    syntax = subprocess.run(["bash", "-n"], input=snippet.code, capture_output=True, text=True)
    assert syntax.returncode == 0, f"{snippet.id}: {syntax.stderr}"
    for line in commands(snippet.code):
        for words in simple_commands(line):
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the command
                words.pop(0)
            if not words:
                continue
            if words[0] == "adapter-critic":
                check_cli(snippet, words[1:])
            elif words[:2] == ["pip", "install"] or words[:4] in (["python", "-m", "pip", "install"],):
                check_install(snippet, words)
            elif words[0] == "uvicorn":
                check_uvicorn(snippet, words[1:])


def simple_commands(line: str) -> list[list[str]]:
    """A command line's simple commands, split at `&&`, `||`, `;` and `|`, each as its words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", "||", ";", "|", "&"):
            found.append([])
        else:
            found[-1].append(token)
    return [words for words in found if words]


def check_cli(snippet: Snippet, args: list[str]) -> None:
    command: click.Command = cli
    parent: click.Context | None = None
    name = "adapter-critic"
    try:
        while True:
            ctx = command.make_context(name, list(args), parent=parent)
            if not isinstance(command, click.Group):
                return
            rest = [*ctx._protected_args, *ctx.args]
            if not rest:
                return
            found, sub, args = command.resolve_command(ctx, rest)
            assert sub is not None and found is not None, f"{snippet.id}: no command {rest[0]!r}"
            name, command, parent = found, sub, ctx
    except click.exceptions.Exit:
        return  # --version, --help
    except click.UsageError as exc:
        raise AssertionError(f"{snippet.id}: adapter-critic {' '.join(args)}: {exc.format_message()}") from None


def check_install(snippet: Snippet, words: list[str]) -> None:
    for word in words[words.index("install") + 1 :]:
        if word.startswith("-"):
            continue
        local = re.fullmatch(r"(?:\.|adapter_critic)(?:\[(?P<extras>[\w,-]+)\])?", word)
        if local:
            extras = set(filter(None, (local.group("extras") or "").split(",")))
            assert extras <= EXTRAS, f"{snippet.id}: no extra {sorted(extras - EXTRAS)} in pyproject.toml"
        elif "/" in word:
            assert (ROOT / word).exists(), f"{snippet.id}: no {word} in the repository"


def check_uvicorn(snippet: Snippet, args: list[str]) -> None:
    target = next(arg for arg in args if not arg.startswith("-") and ":" in arg)
    module, _, attr = target.partition(":")
    app_dir = args[args.index("--app-dir") + 1] if "--app-dir" in args else None
    if app_dir is None:
        assert importlib.util.find_spec(module) is not None, f"{snippet.id}: no module {module}"
    else:
        source = (ROOT / app_dir / f"{module}.py").read_text(encoding="utf-8")
        assert re.search(rf"^{attr} = ", source, re.MULTILINE), f"{snippet.id}: {app_dir}/{module}.py has no {attr}"


# -- PromQL --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("snippet", of("promql"))
def test_promql(snippet: Snippet, request: pytest.FixtureRequest) -> None:
    demo: Demo = request.getfixturevalue("demo")
    exposed = httpx.get(f"{demo.url}/metrics", timeout=30).text
    exposed += Metrics(priced=True).render()[0].decode()  # the cost counter: only a server with prices has it
    series = set()
    for match in re.finditer(r"^# TYPE (\S+) (\w+)$", exposed, re.MULTILINE):
        name, kind = match.groups()
        series.add(name)
        if kind == "histogram":
            series.update((f"{name}_bucket", f"{name}_sum", f"{name}_count"))
        elif kind == "counter":
            series.add(f"{name}_total")
    used = set(re.findall(r"\badapter_critic_\w+", snippet.code))
    assert used, snippet.id
    assert used <= series, f"{snippet.id}: not exposed: {sorted(used - series)}"
