"""The compose stack (deploy/compose.yaml), checked without pulling an image: the compose file as docker-compose
reads it, Prometheus' config by promtool, HAProxy's by haproxy, Grafana's provisioning against the dashboard — and
every panel's PromQL run by a real Prometheus (started here on loopback) scraping a real adapter_critic server under
a short load that makes every series the dashboard shows: plain and streamed runs, a retry, an upstream error, a
degraded answer and a failed run."""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ..conftest import UVICORN, RemoteUpstream, listening_socket, run_server, unavailable
from ..helpers import direct_toml, served_toml
from .conftest import ROOT, tool

DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "adapter_critic.json"
SERVICES = {"adapter_critic", "haproxy", "postgres", "prometheus", "grafana"}


def compose_command() -> list[str]:
    """`docker compose` (the plugin) or `docker-compose`, whichever is here."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    unavailable("neither `docker compose` nor docker-compose is installed here: apt-get install docker-compose")


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of the dashboard, `$__rate_interval` as Grafana would make it here."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", "1m"))
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def test_the_compose_file_and_its_configs_are_valid() -> None:
    config = subprocess.run(
        [*compose_command(), "-f", str(DEPLOY / "compose.yaml"), "config"], capture_output=True, text=True
    )
    assert config.returncode == 0, config.stderr
    services = yaml.safe_load(config.stdout)["services"]
    assert set(services) == SERVICES
    replica = services["adapter_critic"]
    assert replica["environment"]["ADAPTER_CRITIC_STORE"].startswith("postgresql://")
    assert replica["deploy"]["replicas"] == 3 and replica["build"]["dockerfile"] == "Dockerfile"
    for service in services.values():  # every file or folder mounted is in the repository
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            assert not source.startswith("/") or Path(source).exists(), source

    promtool = tool("promtool", "prometheus")
    checked = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")])
    assert checked.returncode == 0
    haproxy = tool("haproxy", "haproxy")
    assert subprocess.run([haproxy, "-c", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")]).returncode == 0

    # Grafana: the provisioned data source is the one every panel names, the provider reads the mounted dashboards.
    sources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yaml").read_text())
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/adapter_critic.yaml").read_text())
    dashboards_at = provider["providers"][0]["options"]["path"]
    assert any(str(v).endswith(f":{dashboards_at}:ro") for v in services["grafana"]["volumes"] if isinstance(v, str))
    panels = json.loads(DASHBOARD.read_text())["panels"]
    uids = {panel["datasource"]["uid"] for panel in panels if "datasource" in panel}
    assert uids == {sources["datasources"][0]["uid"]}


def test_every_dashboard_panel_query_returns_series(upstream_url: str, tmp_path: Path) -> None:
    prometheus = tool("prometheus", "prometheus")
    upstream = RemoteUpstream(upstream_url).reset()
    config = tmp_path / "config.toml"
    config.write_text(_config(f"{upstream_url}/v1"))
    env = {"ADAPTER_CRITIC_CONFIG": str(config), "ADAPTER_CRITIC_STORE": f"sqlite:///{tmp_path / 'runs.db'}"}
    with (
        run_server(UVICORN, env=env) as (url, _),
        _prometheus(prometheus, url.removeprefix("http://"), tmp_path) as query,
    ):
        _until(query, 'up{job="adapter_critic"} == 1')
        answered = 0
        for round_ in range(2):  # two rounds, each scraped after it: every rate has two samples to compare
            answered += _load(url, upstream, round_)
            _until(query, f"sum(adapter_critic_requests_total) >= {answered}")
        for title, expr in panel_queries():
            result = query(expr)
            values = [float(series["value"][1]) for series in result]
            assert values, f"{title}: no series for {expr}"
            assert any(math.isfinite(v) for v in values), f"{title}: {expr} gave {values}"


def _config(base_url: str) -> str:
    """m-direct and m-critic, and m-flaky: direct, its one call retried once; every model priced."""
    flaky = direct_toml(base_url, name="m-flaky", model="api-model").replace(" }", ", retries = 1 }")
    prices = '[prices."*-model"]\ninput = 1.0\noutput = 2.0\n'  # the cost panel's series
    served = served_toml(base_url, "m", ("direct", "critic"))
    return "retries = 0\nretry_backoff_seconds = 0\n" + served + flaky + prices


def _load(url: str, upstream: RemoteUpstream, round_: int) -> int:
    """One round of requests; returns how many runs it made."""
    upstream.script(
        {"status": 500, "match": f"flaky-{round_}"},  # answered on the retry
        {"status": 500, "model": "critic-model", "match": f"degrade-{round_}"},  # the review fails: the draft
        {"status": 400, "match": f"fail-{round_}"},  # the run fails
    )
    requests = [
        ("m-direct", "hello", False, 200),
        ("m-direct", "hello", True, 200),
        ("m-critic", "hello", False, 200),
        ("m-critic", "hello", True, 200),
        ("m-flaky", f"flaky-{round_}", False, 200),
        ("m-critic", f"degrade-{round_}", False, 200),
        ("m-direct", f"fail-{round_}", False, 400),
    ]
    with httpx.Client(base_url=f"{url}/v1", timeout=30) as client:
        for model, text, stream, status in requests:
            body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}
            answer = client.post("/chat/completions", json=body)
            assert answer.status_code == status, answer.text
    return len(requests)


@contextlib.contextmanager
def _prometheus(binary: str, target: str, folder: Path) -> Iterator[Any]:
    """A Prometheus on loopback scraping `target` every second; yields `query(expr)` -> the result's series."""
    sock = listening_socket()  # a free port, released for Prometheus to take
    port = sock.getsockname()[1]
    sock.close()
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: adapter_critic\n    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(folder / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v1/query"

    def query(expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(api, params={"query": expr}, timeout=30).json()
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Prometheus did not start: {(folder / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield query
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _until(query: Any, expr: str, wait: float = 60) -> None:
    """Wait until Prometheus' answer to `expr` has a series (it scrapes every second)."""
    deadline = time.monotonic() + wait
    while not query(expr):
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus never answered {expr} with a series")
        time.sleep(0.2)
