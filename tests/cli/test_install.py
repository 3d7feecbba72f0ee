"""What the README's first command (`pip install '.[server]'`) gives: a working `adapter-critic`, and a command line
without its extra's packages that still answers `--version` and says what to install, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from adapter_critic.version import __version__

ROOT = Path(__file__).parents[2]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

# The console script's entry point run as the installed script runs it, with the `cli` extra's packages made
# unimportable (as in an environment that has only the core's).
WITHOUT_CLI_EXTRA = (
    "import sys; sys.modules.update(click=None, rich=None, jsonschema=None); "
    "sys.argv[0] = 'adapter-critic'; from adapter_critic.cli import main; main()"
)


def test_the_server_extra_brings_the_command_lines_packages() -> None:
    assert set(EXTRAS["cli"]) <= set(EXTRAS["server"])


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_CLI_EXTRA, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_version_answers_without_the_cli_extra() -> None:
    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"adapter-critic {__version__}"


def test_a_command_without_the_cli_extra_says_what_to_install() -> None:
    done = run("runs", "list")
    assert done.returncode == 1
    assert "pip install 'adapter_critic[cli]'" in done.stderr and "Traceback" not in done.stderr


def test_the_installed_command_answers_its_version() -> None:
    script = Path(sys.executable).with_name("adapter-critic")
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"adapter-critic {__version__}"
