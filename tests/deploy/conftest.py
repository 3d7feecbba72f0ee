"""The deployment tests' fixtures: the container image built from this checkout, and the machine's tools (Docker,
HAProxy, Prometheus, PostgreSQL) each found or the test skipped saying what is missing — failed under `CI=true`
(`unavailable`), where `.ci/run` installs them and starts the Docker daemon.

The image is built offline by `deploy/build-image.sh --offline` (a debootstrap Debian base, a wheelhouse built on
this machine, a build with no network) and run with `--network host`: every byte stays on loopback.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..conftest import unavailable

ROOT = Path(__file__).parents[2]
IMAGE = "adapter-critic:test"


def tool(name: str, package: str) -> str:
    """`name`'s path, or skip (fail under CI) naming the Debian package that brings it."""
    found = shutil.which(name)
    if found is None:
        unavailable(f"{name} is not installed here: apt-get install {package}")
    return found


def docker_reason() -> str | None:
    """Why no container can run here, or None."""
    if shutil.which("docker") is None:
        return "docker is not installed here: apt-get install docker.io (.ci/run does)"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "the Docker daemon did not answer `docker info` within 60 s"
    if info.returncode != 0:
        said = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the Docker daemon does not answer `docker info` ({said}); .ci/run starts one"
    return None


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image built from this checkout, tagged `IMAGE` (cached layers make a rebuild quick): once per test run.

    Under pytest-xdist each worker has this session fixture; the first to ask builds the image while holding a lock
    in the run's temporary directory (shared by the workers), the others wait for it and use that build: two builds
    at once would both rewrite deploy/wheelhouse."""
    reason = docker_reason()
    if reason is not None:
        unavailable(reason)
    if shutil.which("debootstrap") is None:
        probe = subprocess.run(["docker", "image", "inspect", "adapter-critic-base:bookworm"], capture_output=True)
        if probe.returncode != 0:
            unavailable("debootstrap is not installed here (the offline base image is made with it)")
    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_dir = run_dir.parent  # this run's directory, the workers' own ones in it
    with open(run_dir / "image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = run_dir / "image.built"
        if not built.exists():
            build = subprocess.run(
                [str(ROOT / "deploy" / "build-image.sh"), "--offline", "--tag", IMAGE],
                env={**os.environ, "PYTHON": sys.executable},
                capture_output=True,
                text=True,
                timeout=1200,
            )
            if build.returncode != 0:
                pytest.fail(f"deploy/build-image.sh failed:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}")
            built.write_text(IMAGE, encoding="utf-8")
    return IMAGE


class Container:
    """A container started by a test (`docker run -d`), removed when the test ends."""

    def __init__(self, container_id: str) -> None:
        self.id = container_id

    def inspect(self, template: str) -> str:
        return docker("inspect", "--format", template, self.id).strip()

    def logs(self) -> str:
        done = subprocess.run(["docker", "logs", self.id], capture_output=True, text=True, timeout=60)
        return done.stdout + done.stderr

    def until_health(self, wanted: str = "healthy", wait: float = 180) -> None:
        """Wait for Docker's health check to report `wanted` (its events, not a poll); fail on another verdict,
        or when `wait` seconds pass."""
        since = self.inspect("{{.Created}}")
        events = subprocess.Popen(
            ["docker", "events", "--since", since, "--filter", f"container={self.id}", "--filter",
             "event=health_status", "--format", "{{.Status}}"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            timer = threading.Timer(wait, events.kill)
            timer.start()
            assert events.stdout is not None
            for line in events.stdout:
                status = line.strip().removeprefix("health_status:").strip()
                if status == wanted:
                    return
                if status != "starting":
                    pytest.fail(f"the container's health check said {status}:\n{self.logs()[-3000:]}")
            pytest.fail(f"no health check said {wanted} within {wait} s:\n{self.logs()[-3000:]}")
        finally:
            timer.cancel()
            events.kill()
            events.communicate()


def docker(*args: str, timeout: float = 120) -> str:
    """`docker ARGS`' output; a failure fails the test with docker's own words."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


RunContainer = Callable[..., Container]


@pytest.fixture
def run_container() -> Iterator[RunContainer]:
    """`run_container(*docker_run_args)` starts a detached container and returns it (a `Container`)."""
    started: list[Container] = []

    def run(*args: str) -> Container:
        container = Container(docker("run", "--detach", *args).strip())
        started.append(container)
        return container

    yield run
    for container in started:
        subprocess.run(["docker", "rm", "--force", "--volumes", container.id], capture_output=True, timeout=120)
