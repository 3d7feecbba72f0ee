"""The README and the documentation site hold together: a short front door, every page in its place, the config
reference complete, and no internal bookkeeping in what users read."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import msgspec
import pytest
import yaml

from adapter_critic import ConfigError
from adapter_critic.config import Config

from .snippets import DOCS, ROOT, markdown_files

README = (ROOT / "README.md").read_text(encoding="utf-8")

# The quick start's two commands, exactly: the demo, and the test suite.
QUICK_START = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install '.[server]' && uvicorn adapter_critic.asgi:app",
    "python3 -m venv .venv-test && . .venv-test/bin/activate && pip install -e '.[dev]' && python -m pytest",
)


def test_the_readme_is_a_front_door() -> None:
    assert len(README.splitlines()) <= 200
    for command in QUICK_START:
        assert f"\n{command}\n" in README
    assert "pip install openai" in README
    for guide in ("mounting", "middleware", "sidecar"):
        assert f"(docs/guides/{guide}.md)" in README


def test_every_link_of_the_readme_leads_to_a_file() -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


GUIDES = (
    "mounting",
    "middleware",
    "sidecar",
    "deployment",
    "workflows",
    "overrides",
    "streaming",
    "protocols",
    "security",
    "limits",
    "store",
    "metrics",
    "cost",
    "cache",
    "tracing",
    "viewer",
    "feedback",
    "learning",
    "cli",
    "evals",
    "tuning",
    "routing",
    "plugins",
)


def test_the_site_has_every_page_of_its_layout_in_its_navigation() -> None:
    layout = {
        "index.md",
        "performance.md",
        "architecture.md",
        "changelog.md",
        *(f"getting-started/{page}.md" for page in ("install", "demo", "upstreams", "real-model", "first-eval")),
        *(f"guides/{page}.md" for page in GUIDES),
        *(f"reference/{page}.md" for page in ("config", "http", "python", "cli", "events")),
    }
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "hooks" not in p.parts}
    assert pages == layout

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)  # mkdocs.yml's !!python tags, if any
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)["nav"]
    assert set(_nav_pages(nav)) == layout


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_user_docs_hold_no_internal_bookkeeping() -> None:
    internal = re.compile(r"§|\bSPEC\b|\bissue \d+|\bnot met\b|\bissues?'s? (?:bound|target)", re.IGNORECASE)
    for path in markdown_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not internal.search(line), f"{path.relative_to(ROOT)}:{number}: {line}"


def config_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference", DOCS / "hooks" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("config_reference", module)
    spec.loader.exec_module(module)
    return module


def test_the_config_reference_has_every_key_with_its_meaning() -> None:
    reference = config_reference()
    sections = reference.sections()
    top = next(s for s in sections if s.name == "top")
    assert [row.key for row in top.rows] == [f.encode_name for f in msgspec.structs.fields(Config)]
    names = {s.name for s in sections}
    assert {"served-model", "target", "store", "telemetry", "ui", "protocol:anthropic", "lens"} <= names
    assert {f"workflow:{mode}" for mode in ("direct", "adapter", "critic", "advisor", "panel", "best_of_n")} <= names
    served = next(s for s in sections if s.name == "served-model")
    assert {"critic", "adapter", "judge", "lenses", "n", "critic_system_prompt"} <= {row.key for row in served.rows}
    for section in sections:
        for row in section.rows:
            assert row.doc, f"{section.title}: `{row.key}` has no docstring in its Struct"
    page = reference.replace_markers("# Config\n\n<!-- config-schema: all -->\n")
    assert "| `max_body_bytes` | integer (> 0) | `33554432` (32 MiB) |" in page


def test_the_config_reference_says_every_key_an_auto_model_takes() -> None:
    reference = config_reference()
    sections = {s.name: s for s in reference.sections()}
    assert {"auto-model", "shadow", "rule", "requestclass"} <= set(sections)
    served = {row.key for row in sections["served-model"].rows}
    assert "shadow" in served and "route" not in served  # `route` is what an auto model's keys are read into
    auto = sections["auto-model"]
    direct = {"mode": "direct", "api": {"model": "m", "base_url": "http://h/v1"}}
    data = {"served_models": {"x": {"mode": "auto", "candidates": ["y"], "unknown": 1}, "y": direct}}
    with pytest.raises(ConfigError) as raised:
        Config.from_dict(data, source="config.toml")
    known = set(str(raised.value).split("known keys here: ")[1].split(", "))  # what the loader accepts
    assert known == {"mode", *(row.key for row in auto.rows), *reference._AUTO_ALSO}
    for key in reference._AUTO_ALSO:
        assert f"`{key}`" in auto.intro


def test_a_key_added_to_a_struct_appears_in_the_reference() -> None:
    reference = config_reference()

    class Example(msgspec.Struct, kw_only=True):
        """An example table."""

        limit: int = 3
        """How many, at most."""

    rows = reference.rows_of(Example, {})
    assert [(r.key, r.type, r.default, r.doc) for r in rows] == [("limit", "integer", "`3`", "How many, at most.")]


def test_pages_link_the_screenshots_that_exist() -> None:
    for path in markdown_files():
        for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", path.read_text(encoding="utf-8")):
            assert (path.parent / image).exists(), f"{path.relative_to(ROOT)}: {image}"


def test_the_site_works_offline() -> None:
    settings = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s+font: false", settings, re.MULTILINE)
    for path in Path(DOCS).rglob("*.md"):
        assert "mermaid" not in path.read_text(encoding="utf-8"), path  # Material loads mermaid from a CDN


def test_every_extra_is_in_the_install_page() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    page = (DOCS / "getting-started" / "install.md").read_text(encoding="utf-8")
    for extra in extras:
        assert f"| `{extra}` |" in page, extra


def test_the_architecture_names_every_part_of_the_package_and_only_parts_that_exist() -> None:
    package = ROOT / "src" / "adapter_critic"
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    for part in package.iterdir():
        if part.name.startswith(("_", ".")) or part.name == "py.typed":
            continue
        name = f"{part.name}/" if part.is_dir() else part.name
        assert f"`{name}`" in page, f"architecture.md does not say what {name} owns"
    for path in re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", page):
        candidates = [package / path, *package.glob(f"*/{path}")]
        assert any(c.exists() for c in candidates), f"architecture.md names {path}, which does not exist"


def test_every_page_the_code_points_at_exists() -> None:
    """Docstrings and messages point readers at the site's pages by path (`docs/guides/store.md`)."""
    for folder in ("src", "tests", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for page in re.findall(r"\bdocs/[\w/-]+\.md", path.read_text(encoding="utf-8")):
                assert (ROOT / page).exists(), f"{path.relative_to(ROOT)} points at {page}, which does not exist"
