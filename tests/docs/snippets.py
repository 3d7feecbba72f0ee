"""The fenced code blocks of README.md and docs/, collected for the snippet tests.

A block is what a reader copies: it is tested by its language (see `test_snippets`). An HTML comment on the line
right above a fence, invisible on the rendered page, says more about it:

- `<!-- snippet: needs WHAT -->`: it cannot run here (it needs a real model server, another tool, or installs
  packages); it is still checked as far as it can be without running it.
- `<!-- snippet: server -->`: a shell block whose last command starts a server that keeps running; the test
  starts it on a socket of its own and asks it for `GET /v1/models`.
- `<!-- snippet: continues -->`: a Python block that goes on from the page's Python block before it.
- `<!-- snippet: dataset -->`: a JSON block that is an eval dataset, one item a line (JSON Lines).
- `<!-- snippet: excerpt PATH -->`: a TOML block that is part of the repository's file PATH.
- `<!-- snippet: against [VAR=value ...] ARGS -->`: a block that talks to `http://127.0.0.1:9000`, where the page
  had `VAR=value uvicorn ARGS --port 9000` started; the test starts that app itself, in the working directory.
- `<!-- snippet: real-model -->`: a shell block for the real model server of docs/getting-started/real-model.md
  (llama-cpp-python with SmolLM2-135M-Instruct at `127.0.0.1:8080`), run by the `real_model` tests against the
  session's server (tests/conftest.py's `llama`), in a working directory whose `examples/smollm2.toml` calls it; with
  `against`, the app it names too. A block that starts `llama_cpp.server` starts it on a port of its own.
- `<!-- snippet: request PATH -->`: a JSON request body to send to the demo at PATH (default
  `/v1/chat/completions`).

A line `--8<-- "PATH"` in a block is the repository's file PATH, included when the site is built
(pymdownx.snippets): the block is tested with the file's text in its place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"

# Languages whose blocks are run or checked, and those that only show output or pictures.
TESTED = {"python", "toml", "json", "yaml", "sh", "promql"}
ALIASES = {"py": "python", "bash": "sh", "shell": "sh", "yml": "yaml"}
SHOWN = {"text"}
KINDS = {"needs", "server", "continues", "dataset", "excerpt", "request", "against", "real-model"}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_INCLUDE = re.compile(r'^\s*--8<--\s+"(?P<path>[^"]+)"\s*$')
_DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(?P<kind>[\w-]+)\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    path: str  # relative to the repository
    line: int  # the opening fence's line, 1-based
    lang: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def needs(self) -> str | None:
        return self.directives.get("needs")


class SnippetError(Exception):
    """A block or a directive the collector cannot read: an unclosed fence, an unknown directive or language."""


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]


def collect(path: Path) -> list[Snippet]:
    """Every fenced block of one Markdown file, with the directives written right above it."""
    relative = path.relative_to(ROOT).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    pending: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive:
            kind = directive.group("kind")
            if kind not in KINDS:
                raise SnippetError(f"{relative}:{i + 1}: unknown snippet directive {kind!r}; known: {sorted(KINDS)}")
            pending[kind] = directive.group("arg")
            i += 1
            continue
        fence = _FENCE.match(line)
        if not fence:
            if pending and line.strip():
                raise SnippetError(f"{relative}:{i + 1}: a snippet directive must stand right above a fence")
            pending = {}
            i += 1
            continue
        indent, marker, info = fence.group("indent"), fence.group("fence"), fence.group("info")
        lang = ALIASES.get(info.lower(), info.lower())
        if lang not in TESTED | SHOWN:
            raise SnippetError(
                f"{relative}:{i + 1}: fenced block in {info or 'no language'!r}: say `text` for output and "
                f"pictures, or one of {sorted(TESTED)}"
            )
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = lines[j].strip()
            if closing.startswith(marker[0] * len(marker)) and not closing.strip(marker[0]):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        else:
            raise SnippetError(f"{relative}:{i + 1}: the fence is never closed")
        code = "\n".join(_included(line) for line in body) + "\n"
        found.append(Snippet(relative, i + 1, lang, code, pending))
        pending = {}
        i = j + 1
    if pending:
        raise SnippetError(f"{relative}: a snippet directive at the end of the file stands above no fence")
    return found


def _included(line: str) -> str:
    include = _INCLUDE.match(line)
    return (ROOT / include.group("path")).read_text(encoding="utf-8").rstrip("\n") if include else line


def collect_all() -> list[Snippet]:
    return [snippet for path in markdown_files() for snippet in collect(path)]


def chain(snippet: Snippet, every: list[Snippet]) -> list[Snippet]:
    """A `continues` Python block with the page's Python blocks it goes on from, first block first."""
    same = [s for s in every if s.path == snippet.path and s.lang == "python" and s.line <= snippet.line]
    blocks = [same.pop()]
    while "continues" in blocks[0].directives:
        if not same:
            raise SnippetError(f"{snippet.id}: `continues`, but no Python block comes before it on the page")
        blocks.insert(0, same.pop())
    return blocks
